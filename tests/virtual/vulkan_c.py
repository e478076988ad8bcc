"""C text the GPU tests share: open the first Vulkan device (a test program's own code)."""

from __future__ import annotations

#: the statements that leave ``instance``, ``physical`` and ``device`` open in a C ``main``
#: (``CHECK`` returns 1 from main on a failed call); a program puts them at its start
OPEN_DEVICE = r"""
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .apiVersion = VK_API_VERSION_1_0};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pApplicationInfo = &app};
    VkInstance instance;
    CHECK(vkCreateInstance(&ici, NULL, &instance));
    uint32_t count = 1;
    VkPhysicalDevice physical;
    VkResult listed = vkEnumeratePhysicalDevices(instance, &count, &physical);
    if ((listed != VK_SUCCESS && listed != VK_INCOMPLETE) || count == 0) {
        fprintf(stderr, "no physical device\n");
        return 1;
    }
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = 0, .queueCount = 1,
                                     .pQueuePriorities = &priority};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &queue};
    VkDevice device;
    CHECK(vkCreateDevice(physical, &dci, NULL, &device));
"""


def program(head: str, body: str) -> str:
    """A C program: ``head`` (includes, helpers, ``int main(...) {``), the device opened,
    then ``body`` (the rest of main)."""
    return head + OPEN_DEVICE.lstrip("\n") + body
