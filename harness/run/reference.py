"""The output check's reference: a greedy continuation by llama-cpp-python on this host.

Why this reference: it is a declared dependency (always installed where the harness runs), it
reads the same GGUF file with llama.cpp's own tokenizer, and it is not the build under test (its
wheel is compiled separately, for this host's CPU), so a kernel bug in a phone build or a build
made from a patched tree does not reach it. What it shares with the build's generator
(harness-generate) is the recipe, done here step by step: the prompt tokenised with special
tokens added and parsed, decoded in one batch, then one token at a time, each the arg-max of the
last logits (ties to the lowest id, as llama.cpp's greedy sampler), stopping at an
end-of-generation token. Each token is kept as the bytes the generator prints for it
(``llama_token_to_piece`` with special tokens rendered). The KV cache's types and flash attention
are the trial's (a q4_0 V cache computes other numbers than an f16 one, rightly); threads and
batch sizes are the host's own.

A reference is computed once per (model file, prompt, token count, KV types, attention) per
process and kept in memory; loading the model is the cost (seconds for a large model).
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

from harness.errors import EngineError
from harness.run.outputcheck import Reference

_PIECE_BYTES = 256
#: the reference's context: a prompt of a few words and its continuation fit with room to spare
CONTEXT = 512
_lock = threading.Lock()
_cache: dict[tuple[str, str, str, int, str, str, bool], Reference] = {}


def identity() -> str:
    """How a verdict names this reference: the package and its version."""
    import llama_cpp

    return f"llama-cpp-python {llama_cpp.__version__} greedy on the host"


def _piece(llama_cpp: Any, vocab: Any, token: int) -> bytes:
    buf = ctypes.create_string_buffer(_PIECE_BYTES)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, _PIECE_BYTES, 0, True)
    if n < 0:
        raise EngineError(f"reference: token {token} has no printable piece")
    return buf.raw[:n]


def ggml_type(name: str) -> int:
    """llama-cpp-python's number for a KV cache type name (f16, q8_0, q4_0, ...)."""
    import llama_cpp

    value = getattr(llama_cpp, f"GGML_TYPE_{name.upper()}", None)
    if not isinstance(value, int):
        raise EngineError(f"reference: llama-cpp-python has no KV cache type {name}")
    return value


def compute(model: Path, prompt: str, tokens: int, threads: int = 2, *, type_k: str = "f16",
            type_v: str = "f16", flash_attn: bool = False) -> Reference:
    """The greedy continuation of ``prompt`` by ``tokens`` tokens (fewer at end of generation),
    with the KV cache's K and V types and flash attention as given."""
    import llama_cpp
    import numpy as np

    if tokens < 1:
        raise EngineError(f"reference: tokens must be >= 1, got {tokens}")
    llm = llama_cpp.Llama(str(model), n_ctx=CONTEXT, n_threads=threads, verbose=False,
                          type_k=ggml_type(type_k), type_v=ggml_type(type_v),
                          flash_attn=flash_attn)
    try:
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        prompt_tokens = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        if not prompt_tokens:
            raise EngineError("reference: the prompt has no tokens")
        if len(prompt_tokens) + tokens > CONTEXT:
            raise EngineError(f"reference: {len(prompt_tokens)} prompt + {tokens} tokens exceed "
                              f"its context of {CONTEXT}")
        echo = b"".join(_piece(llama_cpp, vocab, t) for t in prompt_tokens)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        pieces: list[bytes] = []
        ended = False
        llm.eval(prompt_tokens)
        for _ in range(tokens):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(n_vocab,))
            token = int(np.argmax(logits))  # the first of equal maxima, as llama.cpp's greedy
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                ended = True
                break
            pieces.append(_piece(llama_cpp, vocab, token))
            llm.eval([token])
    finally:
        llm.close()
    return Reference(identity(), echo, tuple(pieces), ended)


def greedy_reference(model: Path, sha256: str, prompt: str, tokens: int, *, type_k: str = "f16",
                     type_v: str = "f16", flash_attn: bool = False) -> Reference:
    """``compute``'s answer, computed once per (model file, prompt, tokens, KV types,
    attention) in this process."""
    key = (str(model), sha256, prompt, tokens, type_k, type_v, flash_attn)
    with _lock:  # one device thread computes, the others wait for its answer
        found = _cache.get(key)
        if found is None:
            found = compute(model, prompt, tokens, type_k=type_k, type_v=type_v,
                            flash_attn=flash_attn)
            _cache[key] = found
        return found
