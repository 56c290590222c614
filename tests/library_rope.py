"""Rotary position embeddings as four libraries publish them, loaded from their installed wheels (no copies).

* Hugging Face transformers (``transformers.models.llama.modeling_llama``): ``LlamaRotaryEmbedding`` (``inv_freq[None,
  :, None].expand(B, -1, 1) @ position_ids[:, None, :]``, transposed, ``cat(freqs, freqs)``, cos/sin) and
  ``apply_rotary_pos_emb`` (rotate-half), imported as the package exports them;
* torchtune (``torchtune/modules/position_embeddings.py``): ``RotaryPositionalEmbeddings`` (a cos/sin cache indexed
  by ``[:T]``, interleaved pairs ``x.reshape(..., -1, 2)``); the package's ``__init__`` imports torchao, so the file
  is loaded by path;
* moshi (``moshi/modules/rope.py``): ``apply_rope`` (interleaved pairs, positions ``offset + arange(T)``, time before
  or after the heads); its only relative import (``torch_compile_lazy``) is replaced by the identity;
* x-transformers (``x_transformers/x_transformers.py``): ``RotaryEmbedding`` (``einsum('b i , j -> b i j', t,
  inv_freq)``, interleaved by ``rearrange``) and ``apply_rotary_pos_emb`` (``freqs[:, -seq_len:]``, partial rotary);
  the module imports loguru, einx and more at its top, so these three definitions and the helpers they call are
  taken from the file's source by name (``ast``) and run with torch and einops.

Pinned in ``tests/requirements-thirdparty.txt`` (moshi, torchtune, x-transformers, installed with ``--no-deps``) and
the ``dev`` extra (transformers).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path

import pytest


def _site_file(package: str, rel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (tests/requirements-thirdparty.txt)")
    return Path(list(spec.submodule_search_locations)[0]) / rel


def hf_llama():
    """(LlamaRotaryEmbedding, apply_rotary_pos_emb, LlamaConfig) from transformers."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    return LlamaRotaryEmbedding, apply_rotary_pos_emb, LlamaConfig


def torchtune_rope():
    """torchtune's ``RotaryPositionalEmbeddings`` class (its file loaded by path)."""
    path = _site_file("torchtune", "modules/position_embeddings.py")
    spec = importlib.util.spec_from_file_location("_torchtune_position_embeddings", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.RotaryPositionalEmbeddings


def moshi_apply_rope():
    """moshi's ``apply_rope(q, k, offset, max_period, time_before_heads)`` (rope.py run with its relative import of
    ``torch_compile_lazy`` replaced by the identity)."""
    path = _site_file("moshi", "modules/rope.py")
    src = path.read_text().replace("from ..utils.compile import torch_compile_lazy",
                                   "torch_compile_lazy = lambda fn: fn")
    mod = types.ModuleType("_moshi_rope")
    exec(compile(src, str(path), "exec"), mod.__dict__)  # noqa: S102 - the installed wheel's own source
    return mod.apply_rope


def x_transformers_rope():
    """(RotaryEmbedding, apply_rotary_pos_emb) of x-transformers, with the helpers they call, from the file's source."""
    import torch
    from einops import rearrange

    path = _site_file("x_transformers", "x_transformers.py")
    tree = ast.parse(path.read_text())
    want = {"exists", "default", "disable_autocast", "RotaryEmbedding", "rotate_half", "apply_rotary_pos_emb"}
    body = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in want]
    missing = want - {n.name for n in body}
    if missing:
        pytest.skip(f"x-transformers no longer defines {sorted(missing)}")
    mod = types.ModuleType("_x_transformers_rope")
    from functools import wraps

    mod.__dict__.update(torch=torch, nn=torch.nn, Module=torch.nn.Module, arange=torch.arange, stack=torch.stack,
                        cat=torch.cat, is_tensor=torch.is_tensor, einsum=torch.einsum, autocast=torch.amp.autocast,
                        wraps=wraps, rearrange=rearrange)
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), mod.__dict__)  # noqa: S102
    sys.modules.setdefault("_x_transformers_rope", mod)
    return mod.RotaryEmbedding, mod.apply_rotary_pos_emb
