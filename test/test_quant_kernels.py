"""The int8 dot product in groups of 4 (Ops.DOT4, nn/quant.py's dot4): exact against numpy's int64 on every device and
CPU target, as one vpdpbusd per vector on AVX-512 VNNI, vpmaddwd without it, and CUDA's dp4a (nvcc for sm_80/sm_90)."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from lazytensor import Context, Tensor, dtypes
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import lower_kernel
from lazytensor.nn.quant import dot4
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import Kernel
from lazytensor.renderer.cpu_target import CPUTarget, cpu_target
from lazytensor.renderer.llvm import LLVMRenderer, dot4_kind
from lazytensor.runtime.cuda_compiler import find_nvcc
from lazytensor.runtime.ops_cpu import LLVMCompiler
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.opcodes import Ops, exec_alu

rng = np.random.default_rng(0)
EDGES = np.array([0, -1, 0x7F7F7F7F, -0x80808080, 0x00FF80FF, 0x7F80FF01], dtype=np.int64).astype(np.int32)

def _words(*shape: int) -> np.ndarray:
  w = rng.integers(-2 ** 31, 2 ** 31, shape, dtype=np.int64).astype(np.int32)
  w.reshape(-1)[:len(EDGES)] = EDGES[:w.size]  # the extreme bytes: 0, 255 (unsigned) and -128, 127 (signed)
  return w

def _reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Per pair of words: the 4 products of a's bytes unsigned and b's signed, summed in int64."""
  au = np.ascontiguousarray(a).view(np.uint8).reshape(*a.shape, 4).astype(np.int64)
  bs = np.ascontiguousarray(b).view(np.int8).reshape(*b.shape, 4).astype(np.int64)
  return (au * bs).sum(-1)

def _matmul(a: Tensor, b: Tensor) -> Tensor:
  """(m, k) words by (k, n) words: the weights' layout of QuantizedLinear (vectors along n)."""
  return dot4(a.reshape(a.shape[0], a.shape[1], 1), b.reshape(1, *b.shape)).sum(1, dtype=dtypes.int32)

def test_constant_folding_agrees() -> None:
  for x, y in zip(EDGES, EDGES[::-1]):
    assert exec_alu(Ops.DOT4, dtypes.int32, (int(x), int(y))) == _reference(np.array([x]), np.array([y]))[0]

@pytest.mark.parametrize("device", ["CPU", "EMU", "CUDACPU"])
def test_elementwise_and_matmul_exact(device: str) -> None:
  if device == "CUDACPU" and shutil.which("g++") is None: pytest.skip("CUDACPU needs g++")
  a, b = _words(7, 33), _words(33, 19)
  with Context(NVCC_CHECK=device == "CUDACPU" and find_nvcc() is not None):
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal(dot4(ta, tb.T[:7]).numpy(), _reference(a, b.T[:7]))  # b read through a transpose
    np.testing.assert_array_equal(_matmul(ta, tb).numpy(), _reference(a[:, :, None], b[None]).sum(1))

@pytest.mark.parametrize("target", ["native", "x86-64-v3", "x86-64-v2"])
@pytest.mark.parametrize("m, k, n", [(64, 256, 64), (30, 40, 50), (1, 7, 16), (96, 64, 48)])
def test_cpu_targets_exact(target: str, m: int, k: int, n: int) -> None:
  if not cpu_target(target).runs_on_host: pytest.skip(f"{target} does not run here")
  a, b = _words(m, k), _words(k, n)
  with Context(CPU_TARGET=target):
    np.testing.assert_array_equal(_matmul(Tensor(a), Tensor(b)).numpy(), _reference(a[:, :, None], b[None]).sum(1))

def _assembly(target: CPUTarget) -> str:
  a, b = Tensor(_words(256, 64)), Tensor(_words(64, 256))
  with Context(CPU_TARGET=target.name): item = create_schedule([_matmul(a, b).lazydata])[0][-1]
  renderer = LLVMRenderer(target)
  k = hand_coded_optimizations(Kernel(item.ast, renderer))
  return LLVMCompiler(target).assembly(renderer.render("k", linearize(lower_kernel(k))))

VNNI = dataclasses.replace(cpu_target("x86-64-v4"), name="x86-64-v4", features="+avx512vnni")

def test_vnni_takes_vpdpbusd() -> None:
  # compile-only: any host can emit code for AVX-512 VNNI. The accumulator is vpdpbusd's own operand: no add after it
  assert dot4_kind(VNNI, 16) == "vnni" and dot4_kind(cpu_target("x86-64-v4"), 16) == "pmaddwd"
  asm = _assembly(VNNI)
  assert asm.count("vpdpbusd") >= 8 and "vpmaddwd" not in asm and "zmm" in asm

def test_avx2_takes_vpmaddwd() -> None:
  asm = _assembly(cpu_target("x86-64-v3"))
  assert asm.count("vpmaddwd") >= 8 and "vpdpbusd" not in asm and "ymm" in asm and "zmm" not in asm
