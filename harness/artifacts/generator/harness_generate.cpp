// harness-generate: the output check's greedy generator, built with every llama.cpp build the
// harness makes (harness/artifacts/generator/generator.cmake adds it to llama.cpp's own tree).
//
// It continues a prompt greedily with the knobs of the trial it checks: threads, batch and
// micro-batch sizes, the KV cache's K and V types, flash attention, the device and the number of
// layers offloaded to it. A kernel bug that shows only in one of those paths (a quantised V
// cache, flash attention, a batch split, a GPU) is then looked at where the trial ran it.
//
// Output, on stdout: the prompt's tokens as pieces (special tokens rendered), then each
// generated token's piece as it comes, then a newline; everything else goes to stderr. That is
// the output harness.run.outputcheck compares with the host reference.
//
//   harness-generate -m MODEL [-n N] [-t T] [-b B] [-ub U] [-ctk TYPE] [-ctv TYPE]
//                    [-fa on|off|auto] [-dev NAME|none] [-ngl L] PROMPT...
//
// Written against llama.h's stable calls (llama_batch_get_one, llama_decode, the greedy sampler).

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string model;
    std::string prompt;
    int n_predict = 16;
    int threads = 0;  // 0: llama.cpp's default
    int n_batch = 0;
    int n_ubatch = 0;
    std::string type_k = "f16";
    std::string type_v = "f16";
    std::string flash_attn = "off";
    std::string device;  // "": llama.cpp picks; "none": CPU only
    int n_gpu_layers = 0;
};

void usage(const char * self) {
    fprintf(stderr,
            "usage: %s -m MODEL [-n N] [-t THREADS] [-b N_BATCH] [-ub N_UBATCH] [-ctk TYPE] "
            "[-ctv TYPE] [-fa on|off|auto] [-dev NAME|none] [-ngl LAYERS] PROMPT...\n", self);
}

bool parse_int(const char * text, int * out) {
    char * end = nullptr;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0') {
        return false;
    }
    *out = static_cast<int>(value);
    return true;
}

bool parse(int argc, char ** argv, Options * opt) {
    int i = 1;
    for (; i < argc; ++i) {
        std::string flag = argv[i];
        if (flag.empty() || flag[0] != '-') {
            break;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", flag.c_str());
            return false;
        }
        const char * value = argv[++i];
        bool ok = true;
        if (flag == "-m") {
            opt->model = value;
        } else if (flag == "-n") {
            ok = parse_int(value, &opt->n_predict) && opt->n_predict > 0;
        } else if (flag == "-t") {
            ok = parse_int(value, &opt->threads) && opt->threads > 0;
        } else if (flag == "-b") {
            ok = parse_int(value, &opt->n_batch) && opt->n_batch > 0;
        } else if (flag == "-ub") {
            ok = parse_int(value, &opt->n_ubatch) && opt->n_ubatch > 0;
        } else if (flag == "-ctk") {
            opt->type_k = value;
        } else if (flag == "-ctv") {
            opt->type_v = value;
        } else if (flag == "-fa") {
            opt->flash_attn = value;
            ok = opt->flash_attn == "on" || opt->flash_attn == "off" || opt->flash_attn == "auto";
        } else if (flag == "-dev") {
            opt->device = value;
        } else if (flag == "-ngl") {
            ok = parse_int(value, &opt->n_gpu_layers);
        } else {
            fprintf(stderr, "error: unknown option %s\n", flag.c_str());
            return false;
        }
        if (!ok) {
            fprintf(stderr, "error: bad value for %s: %s\n", flag.c_str(), value);
            return false;
        }
    }
    for (; i < argc; ++i) {
        opt->prompt += opt->prompt.empty() ? "" : " ";
        opt->prompt += argv[i];
    }
    if (opt->model.empty() || opt->prompt.empty()) {
        usage(argv[0]);
        return false;
    }
    return true;
}

bool kv_type(const std::string & name, ggml_type * out) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * known = ggml_type_name(static_cast<ggml_type>(t));
        if (known != nullptr && name == known) {
            *out = static_cast<ggml_type>(t);
            return true;
        }
    }
    fprintf(stderr, "error: unknown KV cache type %s\n", name.c_str());
    return false;
}

bool print_piece(const llama_vocab * vocab, llama_token token) {
    char buf[256];
    int n = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, true);
    if (n < 0) {
        fprintf(stderr, "error: token %d has no piece\n", token);
        return false;
    }
    fwrite(buf, 1, static_cast<size_t>(n), stdout);
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    Options opt;
    if (!parse(argc, argv, &opt)) {
        return 2;
    }
    ggml_type type_k;
    ggml_type type_v;
    if (!kv_type(opt.type_k, &type_k) || !kv_type(opt.type_v, &type_v)) {
        return 2;
    }
    llama_backend_init();

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = opt.n_gpu_layers;
    std::vector<ggml_backend_dev_t> devices;
    if (!opt.device.empty()) {
        if (opt.device != "none") {
            ggml_backend_dev_t dev = ggml_backend_dev_by_name(opt.device.c_str());
            if (dev == nullptr) {
                fprintf(stderr, "error: this build has no device %s\n", opt.device.c_str());
                return 1;
            }
            devices.push_back(dev);
        }
        devices.push_back(nullptr);  // an empty list: the CPU only
        mparams.devices = devices.data();
    }
    llama_model * model = llama_model_load_from_file(opt.model.c_str(), mparams);
    if (model == nullptr) {
        fprintf(stderr, "error: cannot load %s\n", opt.model.c_str());
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_prompt = -llama_tokenize(vocab, opt.prompt.c_str(),
                                         static_cast<int32_t>(opt.prompt.size()), nullptr, 0,
                                         true, true);
    std::vector<llama_token> tokens(static_cast<size_t>(n_prompt));
    if (n_prompt <= 0 || llama_tokenize(vocab, opt.prompt.c_str(),
                                        static_cast<int32_t>(opt.prompt.size()), tokens.data(),
                                        n_prompt, true, true) < 0) {
        fprintf(stderr, "error: cannot tokenise the prompt\n");
        return 1;
    }

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = static_cast<uint32_t>(n_prompt + opt.n_predict + 1);
    const int n_batch = opt.n_batch > 0 ? opt.n_batch : n_prompt;
    cparams.n_batch = static_cast<uint32_t>(n_batch);
    cparams.n_ubatch = static_cast<uint32_t>(opt.n_ubatch > 0 ? opt.n_ubatch : n_batch);
    if (cparams.n_ubatch > cparams.n_batch) {
        cparams.n_ubatch = cparams.n_batch;  // as llama.cpp clamps it
    }
    if (opt.threads > 0) {
        cparams.n_threads = opt.threads;
        cparams.n_threads_batch = opt.threads;
    }
    cparams.type_k = type_k;
    cparams.type_v = type_v;
    cparams.flash_attn_type = opt.flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                              : opt.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                        : LLAMA_FLASH_ATTN_TYPE_AUTO;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (ctx == nullptr) {
        fprintf(stderr, "error: cannot make a context with these settings\n");
        return 1;
    }
    llama_sampler * greedy = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(greedy, llama_sampler_init_greedy());

    for (llama_token token : tokens) {
        if (!print_piece(vocab, token)) {
            return 1;
        }
    }
    // the prompt in batches of n_batch tokens, as the trial's engine feeds it
    for (int at = 0; at < n_prompt; at += n_batch) {
        const int count = n_prompt - at < n_batch ? n_prompt - at : n_batch;
        if (llama_decode(ctx, llama_batch_get_one(tokens.data() + at, count)) != 0) {
            fprintf(stderr, "error: decoding the prompt failed\n");
            return 1;
        }
    }
    for (int i = 0; i < opt.n_predict; ++i) {
        llama_token next = llama_sampler_sample(greedy, ctx, -1);
        if (llama_vocab_is_eog(vocab, next)) {
            break;
        }
        if (!print_piece(vocab, next)) {
            return 1;
        }
        fflush(stdout);
        if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) {
            fprintf(stderr, "error: decoding token %d failed\n", i);
            return 1;
        }
    }
    printf("\n");
    llama_sampler_free(greedy);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
