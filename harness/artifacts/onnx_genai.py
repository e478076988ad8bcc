"""Export a llama-architecture GGUF as an onnxruntime-genai model folder, without torch.

onnxruntime-genai runs a folder of ``model.onnx`` (the graph), ``model.onnx.data`` (its weights,
as ONNX external data) and ``genai_config.json`` (how the generator drives the graph). Its own
model builder starts from a Hugging Face checkpoint and needs torch; the harness's models are
GGUF files (the synthetic ladder), so this module reads the GGUF with ``gguf`` and writes the
graph with ``onnx`` and numpy only.

The graph is one decoder step over ``input_ids`` [batch, seq] and ``attention_mask``
[batch, total], with a key/value cache per layer (``past_key_values.N.{key,value}`` in,
``present.N.{key,value}`` out), the names and layout the generator expects:

* token embedding: ``Gather`` on the embedding matrix;
* per layer: ``SimplifiedLayerNormalization`` (RMSNorm), q/k/v ``MatMul``, the contrib op
  ``com.microsoft.GroupQueryAttention`` with its built-in rotary embedding, output ``MatMul``,
  residual ``Add``, RMSNorm, SwiGLU FFN (``Sigmoid``/``Mul`` for SiLU), residual ``Add``;
* final RMSNorm and the output head (``output.weight``, or the embedding when tied).

GroupQueryAttention takes ``seqlens_k`` (valid tokens - 1) and ``total_sequence_length``, both
derived in the graph from the attention mask, and cos/sin caches precomputed here. Its rotary is
used *interleaved* (adjacent pairs rotate together): that is llama.cpp's "normal" rope for the
llama architecture, and GGUF's q/k rows are already in that order (convert_hf_to_gguf permutes
Hugging Face's half-split rows), so no permutation is needed.

Weights are written as F32. A quantised GGUF is dequantised: its rounding errors are kept, but
onnxruntime then computes in F32, not with llama.cpp's quantised kernels (no Q8 activations, no
K-quant dot products), so an exported Q4_K_M is *not* the same quantisation as llama.cpp running
that file, and its size and speed are those of an F32 model.

Only the dense llama architecture with full-width rotary and no rope scaling is supported (the
synthetic ladder); anything else raises ModelError naming the file. The genai_config pins no
thread count: the benchmark sets intra-op threads per run (harness/engines/ort_genai_bench.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from harness.artifacts.hashing import cached_file_sha256
from harness.artifacts.ladder import default_cache_root, exclusive
from harness.errors import ModelError

__all__ = [
    "CONFIG_NAME",
    "CONVERTER_VERSION",
    "DATA_NAME",
    "MAX_CONTEXT",
    "MODEL_NAME",
    "LlamaShape",
    "ensure_onnx_genai",
    "export_onnx_genai",
    "read_shape",
]

# Bump whenever the graph or the config written changes, so cached folders are remade.
CONVERTER_VERSION = 1
MODEL_NAME = "model.onnx"
DATA_NAME = "model.onnx.data"
CONFIG_NAME = "genai_config.json"
FILES = (MODEL_NAME, DATA_NAME, CONFIG_NAME)
# The cos/sin caches hold one row per position; a real model's 128k context would make them
# (and the generator's buffers) large for nothing a phone benchmark reaches.
MAX_CONTEXT = 8192
OPSET = 17
_DATA_ALIGN = 64  # bytes; each weight starts at a multiple, so it can be mapped aligned
# Smaller tensors (the graph's int64 constants) stay inside model.onnx: shape inference has to
# read them, and it does not open external data.
_INLINE_BYTES = 1024

# Tensors a dense llama GGUF may hold; any other name (biases, experts, rope factors) is refused
# rather than silently dropped.
_GLOBAL_TENSORS = {"token_embd.weight", "output_norm.weight", "output.weight"}
_LAYER_TENSORS = (
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
    "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
)


@dataclass(frozen=True)
class LlamaShape:
    """The hyper-parameters of a llama GGUF that the graph and genai_config need."""

    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int
    rms_eps: float
    rope_base: float
    bos_token_id: int
    eos_token_id: int
    tied_output: bool

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# --- reading the GGUF -------------------------------------------------------------------------


def _open(gguf_path: Path) -> Any:
    """A GGUFReader on the file; an unreadable file is a ModelError naming it."""
    from gguf import GGUFReader

    try:
        return GGUFReader(gguf_path)
    except (OSError, ValueError, KeyError) as error:
        raise ModelError(f"{gguf_path}: not a readable GGUF ({error})") from None


def _field(reader: Any, key: str, gguf_path: Path) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise ModelError(f"{gguf_path}: GGUF has no {key}")
    return field.contents()


def _refuse(gguf_path: Path, arch: str, why: str) -> ModelError:
    return ModelError(f"{gguf_path}: architecture {arch!r} {why}; the onnxruntime-genai export "
                      f"supports only dense llama")


def _check_tensors(reader: Any, n_layer: int, gguf_path: Path) -> None:
    """Refuse a llama file with tensors the graph would not use (MoE experts, biases, ...)."""
    allowed = set(_GLOBAL_TENSORS)
    allowed.update(f"blk.{i}.{t}.weight" for i in range(n_layer) for t in _LAYER_TENSORS)
    extra = sorted(t.name for t in reader.tensors if t.name not in allowed)
    if extra:
        raise _refuse(gguf_path, "llama", f"has tensors this export does not handle ({extra[0]}"
                      f"{', ...' if len(extra) > 1 else ''})")


def read_shape(gguf_path: Path, reader: Any | None = None) -> LlamaShape:
    """The llama hyper-parameters of ``gguf_path``; ModelError (one line) for anything else."""
    reader = reader if reader is not None else _open(gguf_path)
    arch = str(_field(reader, "general.architecture", gguf_path))
    if arch != "llama":
        raise _refuse(gguf_path, arch, "is not supported")
    if reader.fields.get("llama.expert_count") is not None and \
            int(_field(reader, "llama.expert_count", gguf_path)) > 0:
        raise _refuse(gguf_path, arch, "with experts (mixture of experts) is not supported")
    if reader.fields.get("llama.rope.scaling.type") is not None:
        raise _refuse(gguf_path, arch, "with rope scaling is not supported")

    def num(key: str) -> Any:
        return _field(reader, f"llama.{key}", gguf_path)

    n_embd, n_head = int(num("embedding_length")), int(num("attention.head_count"))
    head_dim = n_embd // n_head
    rope_key = "llama.rope.dimension_count"
    if reader.fields.get(rope_key) is not None and int(num("rope.dimension_count")) != head_dim:
        raise _refuse(gguf_path, arch, "with partial rotary is not supported")
    n_layer = int(num("block_count"))
    _check_tensors(reader, n_layer, gguf_path)
    names = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in names:
        raise ModelError(f"{gguf_path}: GGUF has no token_embd.weight")
    n_vocab = int(names["token_embd.weight"].shape[1])  # ggml ne: [n_embd, n_vocab]
    rope_base = reader.fields.get("llama.rope.freq_base")
    return LlamaShape(
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=int(num("attention.head_count_kv")),
        n_ff=int(num("feed_forward_length")),
        n_ctx=min(int(num("context_length")), MAX_CONTEXT),
        rms_eps=float(num("attention.layer_norm_rms_epsilon")),
        rope_base=float(rope_base.contents()) if rope_base is not None else 10000.0,
        bos_token_id=int(_field(reader, "tokenizer.ggml.bos_token_id", gguf_path)),
        eos_token_id=int(_field(reader, "tokenizer.ggml.eos_token_id", gguf_path)),
        tied_output="output.weight" not in names,
    )


def _weight(reader_tensor: Any) -> np.ndarray:
    """A GGUF tensor dequantised to F32, in numpy layout (ggml's ne reversed: [out, in])."""
    from gguf.quants import dequantize

    values = dequantize(reader_tensor.data, reader_tensor.tensor_type)
    shape = [int(n) for n in reversed(reader_tensor.shape)]
    return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)


# --- writing the graph ------------------------------------------------------------------------


class _Weights:
    """Streams initialisers into ``model.onnx.data`` one at a time (the model never sits in
    memory twice) and hands back TensorProtos that point at them as external data."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self.protos: list[TensorProto] = []

    def add(self, name: str, array: np.ndarray) -> str:
        if array.nbytes < _INLINE_BYTES:
            self.protos.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
            return name
        offset = self._handle.tell()
        pad = -offset % _DATA_ALIGN
        self._handle.write(b"\0" * pad)
        offset += pad
        raw = np.ascontiguousarray(array).tobytes()
        self._handle.write(raw)
        proto = TensorProto()
        proto.name = name
        proto.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        proto.dims.extend(array.shape)
        proto.data_location = TensorProto.EXTERNAL
        for key, value in (("location", DATA_NAME), ("offset", str(offset)),
                           ("length", str(len(raw)))):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
        self.protos.append(proto)
        return name


class _Graph:
    """The nodes of the decoder graph, with helpers for the few blocks a llama layer repeats."""

    def __init__(self, reader: Any, shape: LlamaShape, weights: _Weights) -> None:
        self.tensors = {t.name: t for t in reader.tensors}
        self.shape = shape
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []

    def node(self, op: str, inputs: list[str], output: str, domain: str = "",
             outputs: list[str] | None = None, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, outputs or [output], name=output,
                                           domain=domain, **attrs))
        return output

    def linear(self, x: str, gguf_name: str, out: str) -> str:
        """x @ W.T, W [out, in] from the GGUF, stored transposed (no Transpose node)."""
        w = self.weights.add(f"{out}.weight", _weight(self.tensors[gguf_name]).T)
        return self.node("MatMul", [x, w], out)

    def rms_norm(self, x: str, gguf_name: str, out: str) -> str:
        gamma = self.weights.add(f"{out}.weight", _weight(self.tensors[gguf_name]).reshape(-1))
        return self.node("SimplifiedLayerNormalization", [x, gamma], out, axis=-1,
                         epsilon=self.shape.rms_eps, stash_type=1)

    def attention_lengths(self) -> None:
        """seqlens_k = sum(mask) - 1 (int32 [batch]) and total_sequence_length = mask width
        (int32 scalar): the two length inputs GroupQueryAttention reads."""
        one = self.weights.add("const.one", np.array([1], np.int64))
        self.node("ReduceSum", ["attention_mask", one], "mask.sum", keepdims=0)
        self.node("Sub", ["mask.sum", one], "mask.sum_minus_1")
        self.node("Cast", ["mask.sum_minus_1"], "seqlens_k", to=TensorProto.INT32)
        self.node("Shape", ["attention_mask"], "mask.shape")
        self.node("Gather", ["mask.shape", one], "mask.width", axis=0)
        self.node("Squeeze", ["mask.width"], "mask.width_scalar")
        self.node("Cast", ["mask.width_scalar"], "total_sequence_length", to=TensorProto.INT32)

    def rotary_caches(self) -> None:
        """cos/sin of position * base^(-2i/head_dim), [n_ctx, head_dim / 2] each."""
        s = self.shape
        inv_freq = s.rope_base ** (-np.arange(0, s.head_dim, 2, dtype=np.float64) / s.head_dim)
        angles = np.outer(np.arange(s.n_ctx, dtype=np.float64), inv_freq)
        self.weights.add("cos_cache", np.cos(angles).astype(np.float32))
        self.weights.add("sin_cache", np.sin(angles).astype(np.float32))

    def layer(self, i: int, x: str) -> str:
        s, p, n = self.shape, f"blk.{i}.", f"layers.{i}"
        h = self.rms_norm(x, p + "attn_norm.weight", f"{n}.attn_norm")
        q = self.linear(h, p + "attn_q.weight", f"{n}.q_proj")
        k = self.linear(h, p + "attn_k.weight", f"{n}.k_proj")
        v = self.linear(h, p + "attn_v.weight", f"{n}.v_proj")
        inputs = [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                  "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache"]
        outputs = [f"{n}.attn", f"present.{i}.key", f"present.{i}.value"]
        attn = self.node("GroupQueryAttention", inputs, outputs[0], domain="com.microsoft",
                         outputs=outputs, num_heads=s.n_head, kv_num_heads=s.n_head_kv,
                         do_rotary=1, rotary_interleaved=1, scale=float(s.head_dim ** -0.5))
        o = self.linear(attn, p + "attn_output.weight", f"{n}.o_proj")
        x = self.node("Add", [x, o], f"{n}.attn_residual")
        h = self.rms_norm(x, p + "ffn_norm.weight", f"{n}.ffn_norm")
        gate = self.linear(h, p + "ffn_gate.weight", f"{n}.gate_proj")
        up = self.linear(h, p + "ffn_up.weight", f"{n}.up_proj")
        sig = self.node("Sigmoid", [gate], f"{n}.gate_sigmoid")
        silu = self.node("Mul", [gate, sig], f"{n}.gate_silu")
        act = self.node("Mul", [silu, up], f"{n}.swiglu")
        down = self.linear(act, p + "ffn_down.weight", f"{n}.down_proj")
        return self.node("Add", [x, down], f"{n}.ffn_residual")

    def build(self) -> None:
        self.attention_lengths()
        self.rotary_caches()
        embed = self.weights.add("embed_tokens.weight", _weight(self.tensors["token_embd.weight"]))
        x = self.node("Gather", [embed, "input_ids"], "embed_tokens", axis=0)
        for i in range(self.shape.n_layer):
            x = self.layer(i, x)
        x = self.rms_norm(x, "output_norm.weight", "final_norm")
        head = "token_embd.weight" if self.shape.tied_output else "output.weight"
        self.linear(x, head, "logits")


def _io(shape: LlamaShape) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """Graph inputs and outputs, named as genai_config's ``inputs``/``outputs`` say."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    kv: list[str | int] = ["batch_size", shape.n_head_kv]
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", i64,
                                            ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info(
        "logits", f32, ["batch_size", "sequence_length", shape.n_vocab])]
    for i in range(shape.n_layer):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kind}", f32, [*kv, "past_sequence_length", shape.head_dim]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kind}", f32, [*kv, "present_sequence_length", shape.head_dim]))
    return inputs, outputs


def genai_config(shape: LlamaShape) -> dict[str, Any]:
    """genai_config.json: the decoder's shapes and I/O names, greedy search, no thread count.

    ``past_present_share_buffer`` lets GroupQueryAttention write into one key/value buffer of
    ``max_length`` positions instead of copying the cache every step (what the upstream builder
    chooses for this op). ``session_options`` sets no ``intra_op_num_threads``: onnxruntime's
    default (one per physical core) applies unless the caller overlays a count.
    """
    return {
        "model": {
            "type": "llama",
            "bos_token_id": shape.bos_token_id,
            "eos_token_id": shape.eos_token_id,
            "pad_token_id": shape.eos_token_id,
            "context_length": shape.n_ctx,
            "vocab_size": shape.n_vocab,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": MODEL_NAME,
                "head_size": shape.head_dim,
                "hidden_size": shape.n_embd,
                "num_attention_heads": shape.n_head,
                "num_key_value_heads": shape.n_head_kv,
                "num_hidden_layers": shape.n_layer,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            },
        },
        "search": {
            "do_sample": False,
            "early_stopping": True,
            "max_length": shape.n_ctx,
            "min_length": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": True,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }


def _write_folder(gguf_path: Path, folder: Path) -> None:
    """Write the three files of the model folder into ``folder`` (which exists and is empty)."""
    reader = _open(gguf_path)
    shape = read_shape(gguf_path, reader)
    with open(folder / DATA_NAME, "wb") as handle:
        weights = _Weights(handle)
        graph = _Graph(reader, shape, weights)
        graph.build()
    inputs, outputs = _io(shape)
    body = helper.make_graph(graph.nodes, "llama_decoder", inputs, outputs, weights.protos)
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", OPSET),
                                                   helper.make_opsetid("com.microsoft", 1)],
                              producer_name="harness.artifacts.onnx_genai",
                              producer_version=str(CONVERTER_VERSION))
    model.ir_version = 8
    (folder / MODEL_NAME).write_bytes(model.SerializeToString())
    config = json.dumps(genai_config(shape), indent=2) + "\n"
    (folder / CONFIG_NAME).write_text(config, encoding="utf-8")


@contextmanager
def _atomic_folder(dest: Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``dest``; rename it to ``dest`` if the block succeeds
    (replacing an older ``dest``), remove it otherwise."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
            shutil.rmtree(old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_onnx_genai(gguf: Path, out_dir: Path) -> Path:
    """Write the onnxruntime-genai folder of the llama GGUF ``gguf`` at ``out_dir``; return it.

    The folder is built under a temporary sibling name and renamed into place, so an interrupted
    export never leaves a folder that looks finished. ModelError for a non-llama file.
    """
    gguf, out_dir = Path(gguf), Path(out_dir)
    with _atomic_folder(out_dir) as tmp:
        _write_folder(gguf, tmp)
    return out_dir


def onnx_genai_dir(gguf: Path, cache: Path | None = None) -> Path:
    """Where ``ensure_onnx_genai`` keeps the export of ``gguf``: keyed by its content and the
    converter version, under ``<cache root>/onnx-genai/``."""
    root = cache if cache is not None else default_cache_root()
    try:
        digest = cached_file_sha256(gguf)
    except OSError as error:
        raise ModelError(f"{gguf}: cannot read it ({error.strerror or error})") from None
    return root / "onnx-genai" / f"{digest[:16]}-{CONVERTER_VERSION}"


def ensure_onnx_genai(gguf: Path, cache: Path | None = None) -> Path:
    """The cached onnxruntime-genai folder of ``gguf``, exported on the first call.

    ``cache`` replaces the cache root ($HARNESS_CACHE, else ~/.cache/harness). A folder already
    there is returned as is (nothing rewritten); a lock keeps two sessions from exporting at once.
    """
    gguf = Path(gguf)
    dest = onnx_genai_dir(gguf, cache)
    if all((dest / name).exists() for name in FILES):
        return dest
    with exclusive(dest.parent):
        if not all((dest / name).exists() for name in FILES):
            # Holding the lock, no one else is exporting: temporaries are from a killed run.
            for stale in dest.parent.glob(f".{dest.name}.*-*"):
                shutil.rmtree(stale, ignore_errors=True)
            export_onnx_genai(gguf, dest)
    return dest
