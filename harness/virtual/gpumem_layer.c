/*
 * VK_LAYER_HARNESS_gpu_memory: a Vulkan layer that counts the device memory a process allocates.
 *
 * A real phone reports a process's GPU memory (kgsl, `dumpsys meminfo` "Graphics"); a virtual
 * phone runs its engines on Mesa's software driver, where "GPU memory" is ordinary heap the
 * kernel cannot tell apart. This layer sits in the loader's call chain of every Vulkan call,
 * passes everything down unchanged and watches only vkAllocateMemory / vkFreeMemory.
 *
 * When $HARNESS_GPU_MEM_DIR is set (read once, when the library is loaded) every change of the
 * count rewrites $HARNESS_GPU_MEM_DIR/<pid> atomically (<pid>.tmp, then rename) with one line:
 *     <current_bytes> <peak_bytes> <live_allocations>\n
 * Reporting is best effort: a failed write is ignored and never fails the application.
 *
 * When $HARNESS_GPU_KGSL_DIR is set as well (a virtual phone with a readable GPU sets it to its
 * /sys/class/kgsl/kgsl/proc), the layer keeps the nodes Qualcomm's kgsl driver keeps for each
 * process: it makes $HARNESS_GPU_KGSL_DIR/<pid>/ once and, at every change, rewrites
 *     kernel         the process's current GPU allocations, decimal bytes + "\n"
 *     kernel_max     the most it ever held at once (kgsl keeps a max beside each count)
 *     gpumem_mapped  the same as kernel (lavapipe's memory is always mapped into the process)
 *     user, user_max, gpumem_unmapped  "0\n" (written once, with the folder)
 * each atomically (.<name>.tmp in the same folder, then rename), so a sampler that reads them
 * sees the new value at once. The phone removes the folder once the process has exited.
 * What it counts is vkAllocateMemory alone: lavapipe keeps command buffers, pipelines and
 * descriptor pools in the process's heap, where a phone's driver allocates GPU memory for them.
 *
 * Loader interface (LoaderLayerInterface.md, interface version 2): the loader negotiates through
 * vkNegotiateLoaderLayerInterfaceVersion, then builds the chain by calling vkCreateInstance /
 * vkCreateDevice with a VkLayer{Instance,Device}CreateInfo in pNext that names the next link's
 * GetInstanceProcAddr / GetDeviceProcAddr. The layer remembers those per dispatchable object,
 * keyed by the object's dispatch key (the loader's dispatch-table pointer stored in the first
 * word of every dispatchable handle; a VkPhysicalDevice shares its VkInstance's key).
 *
 * Everything inside is static: the exported vkGetInstanceProcAddr / vkGetDeviceProcAddr share
 * their names with the loader's, and a call by name from inside the layer could bind to the
 * loader's copy.
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

/* ------------------------------------------------------------------ dispatch tables */

typedef struct {
    void *key;
    VkInstance instance;
    PFN_vkGetInstanceProcAddr next_gipa;
    PFN_vkDestroyInstance next_destroy;
} InstanceEntry;

typedef struct {
    void *key;
    VkDevice device;
    PFN_vkGetDeviceProcAddr next_gdpa;
    PFN_vkDestroyDevice next_destroy;
    PFN_vkAllocateMemory next_allocate;
    PFN_vkFreeMemory next_free;
    PFN_vkCmdDispatch next_dispatch;
} DeviceEntry;

static pthread_mutex_t g_table_lock = PTHREAD_MUTEX_INITIALIZER;
static InstanceEntry *g_instances;
static size_t g_instance_count, g_instance_cap;
static DeviceEntry *g_devices;
static size_t g_device_count, g_device_cap;

static void *dispatch_key(const void *handle) {
    return *(void *const *)handle;
}

/* Grows *array (of elem-sized items) to hold one more; 0 on success. */
static int reserve_one(void **array, size_t *cap, size_t count, size_t elem) {
    if (count < *cap)
        return 0;
    size_t grown = *cap ? *cap * 2 : 4;
    void *bigger = realloc(*array, grown * elem);
    if (bigger == NULL)
        return -1;
    *array = bigger;
    *cap = grown;
    return 0;
}

static int add_instance(const InstanceEntry *entry) {
    int rc = -1;
    pthread_mutex_lock(&g_table_lock);
    if (reserve_one((void **)&g_instances, &g_instance_cap, g_instance_count,
                    sizeof *g_instances) == 0) {
        g_instances[g_instance_count++] = *entry;
        rc = 0;
    }
    pthread_mutex_unlock(&g_table_lock);
    return rc;
}

/* Copies the entry for key into *out; removes it when remove is set. 1 when found. */
static int find_instance(void *key, InstanceEntry *out, int remove) {
    int found = 0;
    pthread_mutex_lock(&g_table_lock);
    for (size_t i = 0; i < g_instance_count; i++) {
        if (g_instances[i].key == key) {
            *out = g_instances[i];
            if (remove)
                g_instances[i] = g_instances[--g_instance_count];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&g_table_lock);
    return found;
}

static int add_device(const DeviceEntry *entry) {
    int rc = -1;
    pthread_mutex_lock(&g_table_lock);
    if (reserve_one((void **)&g_devices, &g_device_cap, g_device_count, sizeof *g_devices) == 0) {
        g_devices[g_device_count++] = *entry;
        rc = 0;
    }
    pthread_mutex_unlock(&g_table_lock);
    return rc;
}

static int find_device(void *key, DeviceEntry *out, int remove) {
    int found = 0;
    pthread_mutex_lock(&g_table_lock);
    for (size_t i = 0; i < g_device_count; i++) {
        if (g_devices[i].key == key) {
            *out = g_devices[i];
            if (remove)
                g_devices[i] = g_devices[--g_device_count];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&g_table_lock);
    return found;
}

/* ------------------------------------------------------------------ memory accounting */

/* One live allocation. Non-dispatchable handles are unique only per device, so the key is the
 * (device, memory) pair. Chained hash table, power-of-two buckets. */
typedef struct Allocation {
    struct Allocation *next;
    VkDevice device;
    VkDeviceMemory memory;
    VkDeviceSize size;
} Allocation;

static pthread_mutex_t g_memory_lock = PTHREAD_MUTEX_INITIALIZER;
static Allocation **g_buckets;
static size_t g_bucket_count; /* 0 or a power of two */
static uint64_t g_current, g_peak, g_live;

static char *g_report_dir; /* NULL: do not report */
static char *g_kgsl_dir;   /* NULL: no kgsl nodes */
static long g_kgsl_pid;    /* the process whose kgsl folder exists (a forked child makes its own) */

static size_t slot_of(VkDevice device, VkDeviceMemory memory, size_t buckets) {
    uint64_t x = (uint64_t)(uintptr_t)device * 0x9e3779b97f4a7c15ULL ^ (uint64_t)memory;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (size_t)(x & (buckets - 1));
}

/* Keeps the load factor at most 1; a failed grow leaves the table as it was. */
static void grow_buckets(void) {
    if (g_bucket_count != 0 && g_live < g_bucket_count)
        return;
    size_t grown = g_bucket_count ? g_bucket_count * 2 : 64;
    Allocation **fresh = calloc(grown, sizeof *fresh);
    if (fresh == NULL)
        return;
    for (size_t i = 0; i < g_bucket_count; i++) {
        Allocation *node = g_buckets[i];
        while (node != NULL) {
            Allocation *next = node->next;
            size_t slot = slot_of(node->device, node->memory, grown);
            node->next = fresh[slot];
            fresh[slot] = node;
            node = next;
        }
    }
    free(g_buckets);
    g_buckets = fresh;
    g_bucket_count = grown;
}

/* Writes text to dir/name through dir/.name.tmp and a rename; 0 on success, else -1 and errno. */
static int write_atomically(const char *dir, const char *name, const char *text, size_t len) {
    char final_path[4096], tmp_path[4096];
    int n1 = snprintf(final_path, sizeof final_path, "%s/%s", dir, name);
    int n2 = snprintf(tmp_path, sizeof tmp_path, "%s/.%s.tmp", dir, name);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof tmp_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t wrote = write(fd, text + done, len - done);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0)
            break;
        done += (size_t)wrote;
    }
    int closed = close(fd);
    if (done == len && closed == 0 && rename(tmp_path, final_path) == 0)
        return 0;
    int saved = errno;
    unlink(tmp_path);
    errno = saved ? saved : EIO;
    return -1;
}

/* Makes <kgsl dir>/<pid> with its constant nodes once per process; 0 when it is there. */
static int make_kgsl_folder(const char *folder, long pid) {
    if (g_kgsl_pid == pid)
        return 0;
    if (mkdir(folder, 0755) != 0 && errno != EEXIST)
        return -1;
    if (write_atomically(folder, "user", "0\n", 2) != 0 ||
        write_atomically(folder, "user_max", "0\n", 2) != 0 ||
        write_atomically(folder, "gpumem_unmapped", "0\n", 2) != 0)
        return -1;
    g_kgsl_pid = pid;
    return 0;
}

/* Rewrites the process's kgsl nodes; the caller holds g_memory_lock. */
static void write_kgsl(void) {
    if (g_kgsl_dir == NULL)
        return;
    char folder[4096], line[32], peak[32];
    long pid = (long)getpid();
    int n = snprintf(folder, sizeof folder, "%s/%ld", g_kgsl_dir, pid);
    int len = snprintf(line, sizeof line, "%llu\n", (unsigned long long)g_current);
    int plen = snprintf(peak, sizeof peak, "%llu\n", (unsigned long long)g_peak);
    if (n < 0 || (size_t)n >= sizeof folder || len < 0 || (size_t)len >= sizeof line ||
        plen < 0 || (size_t)plen >= sizeof peak)
        return;
    /* Twice at most: a folder removed under us (the phone rebooted) is made again. The max
     * first: a reader never sees a count above its max. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (make_kgsl_folder(folder, pid) == 0 &&
            write_atomically(folder, "kernel_max", peak, (size_t)plen) == 0 &&
            write_atomically(folder, "kernel", line, (size_t)len) == 0 &&
            write_atomically(folder, "gpumem_mapped", line, (size_t)len) == 0)
            return;
        if (errno != ENOENT)
            return;
        g_kgsl_pid = 0;
    }
}

/* Writes the report; the caller holds g_memory_lock, so writes never interleave. */
static void write_report(void) {
    int kgsl_errno = errno; /* the application never sees ours */
    write_kgsl();
    errno = kgsl_errno;
    if (g_report_dir == NULL)
        return;
    char final_path[4096], tmp_path[4096], line[96];
    long pid = (long)getpid();
    int n1 = snprintf(final_path, sizeof final_path, "%s/%ld", g_report_dir, pid);
    int n2 = snprintf(tmp_path, sizeof tmp_path, "%s/%ld.tmp", g_report_dir, pid);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= sizeof tmp_path)
        return;
    int len = snprintf(line, sizeof line, "%llu %llu %llu\n", (unsigned long long)g_current,
                       (unsigned long long)g_peak, (unsigned long long)g_live);
    if (len < 0 || (size_t)len >= sizeof line)
        return;
    int saved_errno = errno; /* the application never sees ours */
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        size_t done = 0;
        while (done < (size_t)len) {
            ssize_t wrote = write(fd, line + done, (size_t)len - done);
            if (wrote < 0 && errno == EINTR)
                continue;
            if (wrote <= 0)
                break;
            done += (size_t)wrote;
        }
        int closed = close(fd);
        if (done != (size_t)len || closed != 0 || rename(tmp_path, final_path) != 0)
            unlink(tmp_path);
    }
    errno = saved_errno;
}

static void record_allocation(VkDevice device, VkDeviceMemory memory, VkDeviceSize size) {
    pthread_mutex_lock(&g_memory_lock);
    grow_buckets();
    Allocation *node = g_bucket_count ? malloc(sizeof *node) : NULL;
    if (node != NULL) { /* without a record a later free could not be matched: count nothing */
        node->device = device;
        node->memory = memory;
        node->size = size;
        size_t slot = slot_of(device, memory, g_bucket_count);
        node->next = g_buckets[slot];
        g_buckets[slot] = node;
        g_current += size;
        if (g_current > g_peak)
            g_peak = g_current;
        g_live++;
        write_report();
    }
    pthread_mutex_unlock(&g_memory_lock);
}

static void forget_allocation(VkDevice device, VkDeviceMemory memory) {
    pthread_mutex_lock(&g_memory_lock);
    if (g_bucket_count != 0) {
        Allocation **link = &g_buckets[slot_of(device, memory, g_bucket_count)];
        while (*link != NULL) {
            Allocation *node = *link;
            if (node->device == device && node->memory == memory) {
                *link = node->next;
                g_current -= node->size;
                g_live--;
                free(node);
                write_report();
                break;
            }
            link = &node->next;
        }
    }
    pthread_mutex_unlock(&g_memory_lock);
}

/* A destroyed device takes its memory with it, whether or not the application freed it. */
static void forget_device(VkDevice device) {
    pthread_mutex_lock(&g_memory_lock);
    int changed = 0;
    for (size_t i = 0; i < g_bucket_count; i++) {
        Allocation **link = &g_buckets[i];
        while (*link != NULL) {
            Allocation *node = *link;
            if (node->device == device) {
                *link = node->next;
                g_current -= node->size;
                g_live--;
                free(node);
                changed = 1;
            } else {
                link = &node->next;
            }
        }
    }
    if (changed)
        write_report();
    pthread_mutex_unlock(&g_memory_lock);
}

/* A faulty GPU, for the output check's tests: HARNESS_GPU_FAULT=drop_dispatches:N records only
 * N-1 of every N compute dispatches (the rest are dropped, as a driver that loses work would):
 * the backend runs, fast and wrong. 0: no fault. */
static unsigned g_drop_every;
static unsigned long g_dispatches;
static pthread_mutex_t g_fault_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void read_environment(void) {
    const char *fault = getenv("HARNESS_GPU_FAULT");
    if (fault != NULL && strncmp(fault, "drop_dispatches:", 16) == 0) {
        long every = strtol(fault + 16, NULL, 10);
        g_drop_every = every >= 2 && every <= 1000 ? (unsigned)every : 0;
    }
    const char *dir = getenv("HARNESS_GPU_MEM_DIR");
    if (dir != NULL && dir[0] != '\0' && strlen(dir) < 4000)
        g_report_dir = strdup(dir);
    const char *kgsl = getenv("HARNESS_GPU_KGSL_DIR");
    if (kgsl != NULL && kgsl[0] != '\0' && strlen(kgsl) < 4000)
        g_kgsl_dir = strdup(kgsl);
}

/* ------------------------------------------------------------------ intercepts */

static PFN_vkVoidFunction layer_intercept(const char *name);

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance,
                                                                          const char *name);
static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device,
                                                                        const char *name);

/* The loader's link in pNext: the one of type sType whose function is VK_LAYER_LINK_INFO. */
static void *find_link(const void *chain, VkStructureType type) {
    /* VkLayerInstanceCreateInfo and VkLayerDeviceCreateInfo begin alike: sType, pNext,
     * function. The loader's chain is const only by declaration: advancing the link is how
     * the next layer finds its own. */
    for (const VkBaseInStructure *item = chain; item != NULL; item = item->pNext) {
        if (item->sType != type)
            continue;
        if (type == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO) {
            VkLayerInstanceCreateInfo *info = (VkLayerInstanceCreateInfo *)item;
            if (info->function == VK_LAYER_LINK_INFO)
                return info;
        } else {
            VkLayerDeviceCreateInfo *info = (VkLayerDeviceCreateInfo *)item;
            if (info->function == VK_LAYER_LINK_INFO)
                return info;
        }
    }
    return NULL;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(const VkInstanceCreateInfo *info,
                                                           const VkAllocationCallbacks *allocator,
                                                           VkInstance *instance) {
    VkLayerInstanceCreateInfo *link =
        find_link(info->pNext, VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO);
    if (link == NULL || link->u.pLayerInfo == NULL)
        return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr next_gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkCreateInstance next_create =
        (PFN_vkCreateInstance)next_gipa(VK_NULL_HANDLE, "vkCreateInstance");
    if (next_create == NULL)
        return VK_ERROR_INITIALIZATION_FAILED;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;

    VkResult result = next_create(info, allocator, instance);
    if (result != VK_SUCCESS)
        return result;
    InstanceEntry entry = {
        .key = dispatch_key(*instance),
        .instance = *instance,
        .next_gipa = next_gipa,
        .next_destroy = (PFN_vkDestroyInstance)next_gipa(*instance, "vkDestroyInstance"),
    };
    if (add_instance(&entry) != 0) {
        if (entry.next_destroy != NULL)
            entry.next_destroy(*instance, allocator);
        *instance = VK_NULL_HANDLE;
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyInstance(VkInstance instance,
                                                        const VkAllocationCallbacks *allocator) {
    if (instance == VK_NULL_HANDLE)
        return;
    InstanceEntry entry;
    if (find_instance(dispatch_key(instance), &entry, 1) && entry.next_destroy != NULL)
        entry.next_destroy(instance, allocator);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(VkPhysicalDevice physical,
                                                         const VkDeviceCreateInfo *info,
                                                         const VkAllocationCallbacks *allocator,
                                                         VkDevice *device) {
    VkLayerDeviceCreateInfo *link =
        find_link(info->pNext, VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO);
    if (link == NULL || link->u.pLayerInfo == NULL)
        return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr next_gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr next_gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    /* The physical device shares its instance's dispatch key. */
    InstanceEntry owner;
    VkInstance instance = VK_NULL_HANDLE;
    if (find_instance(dispatch_key(physical), &owner, 0))
        instance = owner.instance;
    PFN_vkCreateDevice next_create = (PFN_vkCreateDevice)next_gipa(instance, "vkCreateDevice");
    if (next_create == NULL)
        return VK_ERROR_INITIALIZATION_FAILED;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;

    VkResult result = next_create(physical, info, allocator, device);
    if (result != VK_SUCCESS)
        return result;
    DeviceEntry entry = {
        .key = dispatch_key(*device),
        .device = *device,
        .next_gdpa = next_gdpa,
        .next_destroy = (PFN_vkDestroyDevice)next_gdpa(*device, "vkDestroyDevice"),
        .next_allocate = (PFN_vkAllocateMemory)next_gdpa(*device, "vkAllocateMemory"),
        .next_free = (PFN_vkFreeMemory)next_gdpa(*device, "vkFreeMemory"),
        .next_dispatch = (PFN_vkCmdDispatch)next_gdpa(*device, "vkCmdDispatch"),
    };
    if (add_device(&entry) != 0) {
        if (entry.next_destroy != NULL)
            entry.next_destroy(*device, allocator);
        *device = VK_NULL_HANDLE;
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDevice(VkDevice device,
                                                      const VkAllocationCallbacks *allocator) {
    if (device == VK_NULL_HANDLE)
        return;
    DeviceEntry entry;
    if (!find_device(dispatch_key(device), &entry, 1))
        return;
    if (entry.next_destroy != NULL)
        entry.next_destroy(device, allocator);
    forget_device(device);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_AllocateMemory(VkDevice device,
                                                           const VkMemoryAllocateInfo *info,
                                                           const VkAllocationCallbacks *allocator,
                                                           VkDeviceMemory *memory) {
    DeviceEntry entry;
    if (!find_device(dispatch_key(device), &entry, 0) || entry.next_allocate == NULL)
        return VK_ERROR_INITIALIZATION_FAILED;
    VkResult result = entry.next_allocate(device, info, allocator, memory);
    if (result == VK_SUCCESS && *memory != VK_NULL_HANDLE)
        record_allocation(device, *memory, info->allocationSize);
    return result;
}

static VKAPI_ATTR void VKAPI_CALL layer_FreeMemory(VkDevice device, VkDeviceMemory memory,
                                                   const VkAllocationCallbacks *allocator) {
    DeviceEntry entry;
    if (!find_device(dispatch_key(device), &entry, 0) || entry.next_free == NULL)
        return;
    /* Forget first: once freed, the driver may hand the same handle to another thread. */
    if (memory != VK_NULL_HANDLE)
        forget_allocation(device, memory);
    entry.next_free(device, memory, allocator);
}

static VKAPI_ATTR void VKAPI_CALL layer_CmdDispatch(VkCommandBuffer buffer, uint32_t x,
                                                    uint32_t y, uint32_t z) {
    DeviceEntry entry;
    /* a command buffer shares its device's dispatch key */
    if (!find_device(dispatch_key(buffer), &entry, 0) || entry.next_dispatch == NULL)
        return;
    pthread_mutex_lock(&g_fault_lock);
    unsigned long count = ++g_dispatches;
    pthread_mutex_unlock(&g_fault_lock);
    if (g_drop_every != 0 && count % g_drop_every == 0)
        return;
    entry.next_dispatch(buffer, x, y, z);
}

/* ------------------------------------------------------------------ proc addresses */

static PFN_vkVoidFunction layer_intercept(const char *name) {
    static const struct {
        const char *name;
        PFN_vkVoidFunction function;
    } table[] = {
        {"vkGetInstanceProcAddr", (PFN_vkVoidFunction)layer_GetInstanceProcAddr},
        {"vkGetDeviceProcAddr", (PFN_vkVoidFunction)layer_GetDeviceProcAddr},
        {"vkCreateInstance", (PFN_vkVoidFunction)layer_CreateInstance},
        {"vkDestroyInstance", (PFN_vkVoidFunction)layer_DestroyInstance},
        {"vkCreateDevice", (PFN_vkVoidFunction)layer_CreateDevice},
        {"vkDestroyDevice", (PFN_vkVoidFunction)layer_DestroyDevice},
        {"vkAllocateMemory", (PFN_vkVoidFunction)layer_AllocateMemory},
        {"vkFreeMemory", (PFN_vkVoidFunction)layer_FreeMemory},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(name, table[i].name) == 0)
            return table[i].function;
    if (g_drop_every != 0 && strcmp(name, "vkCmdDispatch") == 0)
        return (PFN_vkVoidFunction)layer_CmdDispatch;  /* only a faulty GPU wraps it */
    return NULL;
}

/* Device-level names a vkGetDeviceProcAddr may answer with this layer's own function. */
static int is_device_intercept(const char *name) {
    return strcmp(name, "vkGetDeviceProcAddr") == 0 || strcmp(name, "vkDestroyDevice") == 0 ||
           strcmp(name, "vkAllocateMemory") == 0 || strcmp(name, "vkFreeMemory") == 0 ||
           (g_drop_every != 0 && strcmp(name, "vkCmdDispatch") == 0);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance,
                                                                          const char *name) {
    if (name == NULL)
        return NULL;
    PFN_vkVoidFunction own = layer_intercept(name);
    if (own != NULL)
        return own;
    if (instance == VK_NULL_HANDLE)
        return NULL;
    InstanceEntry entry;
    if (!find_instance(dispatch_key(instance), &entry, 0) || entry.next_gipa == NULL)
        return NULL;
    return entry.next_gipa(instance, name);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device,
                                                                        const char *name) {
    if (name == NULL || device == VK_NULL_HANDLE)
        return NULL;
    if (is_device_intercept(name))
        return layer_intercept(name);
    DeviceEntry entry;
    if (!find_device(dispatch_key(device), &entry, 0) || entry.next_gdpa == NULL)
        return NULL;
    return entry.next_gdpa(device, name);
}

/* ------------------------------------------------------------------ exports */

VK_LAYER_EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance instance,
                                                                               const char *name) {
    return layer_GetInstanceProcAddr(instance, name);
}

VK_LAYER_EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetDeviceProcAddr(VkDevice device,
                                                                             const char *name) {
    return layer_GetDeviceProcAddr(device, name);
}

VK_LAYER_EXPORT VKAPI_ATTR VkResult VKAPI_CALL
vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *negotiate) {
    if (negotiate == NULL || negotiate->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT ||
        negotiate->loaderLayerInterfaceVersion < 2)
        return VK_ERROR_INITIALIZATION_FAILED;
    negotiate->loaderLayerInterfaceVersion = 2;
    negotiate->pfnGetInstanceProcAddr = layer_GetInstanceProcAddr;
    negotiate->pfnGetDeviceProcAddr = layer_GetDeviceProcAddr;
    negotiate->pfnGetPhysicalDeviceProcAddr = NULL;
    return VK_SUCCESS;
}
