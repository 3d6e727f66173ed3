"""extra/examples/generate.py: GPT-2 with a KV cache at Variable positions, against GPT-2 written in numpy on the same
weights (a safetensors file in Hugging Face's layout, written with the safetensors package), and its sampling."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lazytensor import Tensor, Variable
from lazytensor.codegen.program import ProgramSpec
from lazytensor.engine import realize
from lazytensor.opt.kernel import Kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "extra" / "examples"))
import generate  # noqa: E402

safetensors_numpy = pytest.importorskip("safetensors.numpy")
TINY = generate.Config(vocab=64, context=16, dim=32, layers=2, heads=4)

def hf_weights(cfg: generate.Config, rng: np.random.Generator) -> dict[str, np.ndarray]:
  """Random GPT-2 weights named as Hugging Face's GPT2Model saves them (with the causal mask buffers some files
  hold)."""
  w = {"wte.weight": (cfg.vocab, cfg.dim), "wpe.weight": (cfg.context, cfg.dim), "ln_f.weight": (cfg.dim,),
       "ln_f.bias": (cfg.dim,)}
  for i in range(cfg.layers):
    for name, shape in {"ln_1": (cfg.dim,), "ln_2": (cfg.dim,)}.items():
      w[f"h.{i}.{name}.weight"], w[f"h.{i}.{name}.bias"] = shape, shape
    for name, (fan_in, fan_out) in {"attn.c_attn": (cfg.dim, 3 * cfg.dim), "attn.c_proj": (cfg.dim, cfg.dim),
                                    "mlp.c_fc": (cfg.dim, 4 * cfg.dim), "mlp.c_proj": (4 * cfg.dim, cfg.dim)}.items():
      w[f"h.{i}.{name}.weight"], w[f"h.{i}.{name}.bias"] = (fan_in, fan_out), (fan_out,)
  out = {name: (rng.standard_normal(shape) * (0.3 if name.endswith("weight") and len(shape) == 2 else 0.1) +
                (1.0 if shape == (cfg.dim,) and "ln" in name and name.endswith("weight") else 0.0)).astype(np.float32)
         for name, shape in w.items()}
  for i in range(cfg.layers): out[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, cfg.context, cfg.context), np.float32))
  return out

def numpy_gpt2(w: dict[str, np.ndarray], cfg: generate.Config, tokens: list[int]) -> np.ndarray:
  """GPT-2's logits at every position of `tokens`, with no cache: the oracle."""
  def norm(x: np.ndarray, name: str) -> np.ndarray:
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w[name + ".weight"] + w[name + ".bias"]
  def conv1d(x: np.ndarray, name: str) -> np.ndarray: return x @ w[name + ".weight"] + w[name + ".bias"]
  t, d = len(tokens), cfg.dim // cfg.heads
  x = w["wte.weight"][tokens] + w["wpe.weight"][:t]
  for i in range(cfg.layers):
    q, k, v = conv1d(norm(x, f"h.{i}.ln_1"), f"h.{i}.attn.c_attn").reshape(t, 3, cfg.heads, d).transpose(1, 2, 0, 3)
    s = q @ k.transpose(0, 2, 1) / math.sqrt(d) + np.triu(np.full((t, t), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    att = ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(t, cfg.dim)
    x = x + conv1d(att, f"h.{i}.attn.c_proj")
    h = conv1d(norm(x, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc")
    h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    x = x + conv1d(h, f"h.{i}.mlp.c_proj")
  return norm(x, "ln_f") @ w["wte.weight"].T

@pytest.fixture
def weights_file(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
  w = hf_weights(TINY, np.random.default_rng(0))
  path = tmp_path / "gpt2.safetensors"
  safetensors_numpy.save_file(w, str(path))
  return path, w

def test_logits_of_prefill_and_decode_match_numpy(weights_file: tuple[Path, dict[str, np.ndarray]]) -> None:
  path, w = weights_file
  model = generate.GPT2(TINY)
  model.load(str(path))
  seen: list[np.ndarray] = []
  def greedy(logits: np.ndarray) -> int:
    seen.append(logits)
    return int(np.argmax(logits))
  prompt, timing = [5, 17, 3], generate.Timing()
  out = generate.generate(model, prompt, 10, greedy, timing)
  tokens = prompt + out
  ref = numpy_gpt2(w, TINY, tokens)
  for i, logits in enumerate(seen):  # the logits after prompt + i generated tokens
    np.testing.assert_allclose(logits, ref[len(prompt) + i - 1], rtol=1e-4, atol=1e-4)
  assert len(timing.decode_s) == 9

def test_without_a_position_all_logits_and_no_cache(weights_file: tuple[Path, dict[str, np.ndarray]]) -> None:
  # the training form (extra/bench/models.py's GPT-2 step): a whole sequence, every position's logits, no cache made
  path, w = weights_file
  model = generate.GPT2(TINY)
  model.load(str(path))
  tokens = [[5, 17, 3, 9, 60], [1, 2, 3, 4, 5]]
  logits = model(Tensor(tokens, dtype="int32")).numpy()
  assert logits.shape == (2, 5, TINY.vocab)
  for row, seq in zip(logits, tokens): np.testing.assert_allclose(row, numpy_gpt2(w, TINY, seq), rtol=1e-4, atol=1e-4)
  assert all(block.attn.cache is None for block in model.h)

def test_a_decode_step_reads_each_weight_once(weights_file: tuple[Path, dict[str, np.ndarray]]) -> None:
  # the cache's writes and the attention run as schedules of their own: each would compute q, k, v again (reading
  # the c_attn weights) if the projection were not realized first, and each layer's projection would compute the
  # layers before it again (reading their MLP weights) if their outputs were not realized
  path, _ = weights_file
  model = generate.GPT2(TINY)
  model.load(str(path))
  model(Tensor([[5, 17, 3]], dtype="int32"), 0).realize()
  # c_attn's weight, and the MLP's two: no other buffer of the tiny model has these sizes
  sizes = {"attn": TINY.dim * 3 * TINY.dim * 4, "mlp": TINY.dim * 4 * TINY.dim * 4}
  reads = {name: 0 for name in sizes}
  def count(items: list) -> None:
    for name, size in sizes.items(): reads[name] += sum(any(b.nbytes == size for b in bufs) for _, bufs, _ in items)
  realize.run_listeners.append(count)
  try: model(Tensor([[9]], dtype="int32"), Variable("start_pos", 1, TINY.context - 1).bind(3)).realize()
  finally: realize.run_listeners.remove(count)
  assert reads == {"attn": TINY.layers, "mlp": 2 * TINY.layers}

def test_each_layer_writes_its_cache_in_one_kernel(weights_file: tuple[Path, dict[str, np.ndarray]]) -> None:
  # keys and values in one buffer, written by one assign: a kernel and a schedule fewer per layer than two caches
  # written one after the other (each realize is Python a prefill pays for at every layer, each launch a decode step)
  path, _ = weights_file
  model = generate.GPT2(TINY)
  model.load(str(path))
  cache_bytes = {n * TINY.context * TINY.dim * 4 for n in (1, 2)}  # one cache's buffer, or both in one
  writes: list[int] = []
  def count(items: list) -> None:
    writes.append(sum(any(bufs[st.src[0].arg].nbytes in cache_bytes for st in ast.src) for ast, bufs, _ in items))
  model(Tensor([[5, 17, 3]], dtype="int32"), 0).realize()  # the caches made (zeros written)
  realize.run_listeners.append(count)
  try:
    model(Tensor([[5, 17, 3]], dtype="int32"), 0).realize()
    prefill, writes[:] = sum(writes), []
    model(Tensor([[9]], dtype="int32"), Variable("start_pos", 1, TINY.context - 1).bind(3)).realize()
  finally: realize.run_listeners.remove(count)
  assert (prefill, sum(writes)) == (TINY.layers, TINY.layers)

def test_decode_attention_indexes_the_cache_without_division() -> None:
  # the attention over the cache's first start_pos + 1 positions: read as a matmul operand, the symbolic-length view was
  # reshaped and every index divided by the head size (an sdiv and srem per element: 5-15x slower at GPT-2's sizes)
  cfg = generate.Config(vocab=64, context=1024, dim=128, layers=1, heads=2)  # a range too wide to fold the division
  model = generate.GPT2(cfg)
  model(Tensor([[5, 17, 3]], dtype="int32"), 0).realize()
  sources: dict[str, str] = {}
  def keep(k: Kernel, spec: ProgramSpec) -> None: sources[spec.name] = spec.source
  realize.forget_programs()
  realize.kernel_listeners.append(keep)
  try: model(Tensor([[9]], dtype="int32"), Variable("start_pos", 1, cfg.context - 1).bind(3)).realize()
  finally: realize.kernel_listeners.remove(keep)
  over_cache = {name: src for name, src in sources.items() if "start_pos" in name}
  assert len(over_cache) >= 2 and not [name for name, src in over_cache.items() if "div i64" in src or "rem i64" in src]

def test_a_full_cache_runs_the_last_half_again(weights_file: tuple[Path, dict[str, np.ndarray]]) -> None:
  path, w = weights_file
  model = generate.GPT2(TINY)
  model.load(str(path))
  prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
  out = generate.generate(model, prompt, 6, lambda z: int(np.argmax(z)))
  # 2 decode steps fill the cache (16 positions); the fourth token's logits come from the last 8 tokens run as a
  # prompt, the fifth's from a decode step after them
  tokens = prompt + out
  assert out[2] == int(np.argmax(numpy_gpt2(w, TINY, tokens[:16])[-1]))
  assert out[3] == int(np.argmax(numpy_gpt2(w, TINY, tokens[9:17])[-1]))
  assert out[4] == int(np.argmax(numpy_gpt2(w, TINY, tokens[9:18])[-1]))

def test_next_token_greedy_top_k_and_top_p() -> None:
  rng = np.random.default_rng(1)
  logits = np.array([0.0, 3.0, 2.9, -1.0, 2.8], np.float32)
  assert generate.next_token(logits, 0.0, 0, 1.0, rng) == 1
  assert generate.next_token(logits, 1.0, 1, 1.0, rng) == 1  # top-1 is greedy
  assert {generate.next_token(logits, 1.0, 3, 1.0, rng) for _ in range(200)} == {1, 2, 4}
  # the three top tokens hold ~0.97 of the probability: top_p 0.5 keeps the first two (0.35 + 0.32 reaches it)
  assert {generate.next_token(logits, 1.0, 0, 0.5, rng) for _ in range(200)} == {1, 2}
  assert {generate.next_token(logits, 1.0, 0, 1.0, rng) for _ in range(500)} == {0, 1, 2, 3, 4}

def test_the_script_on_a_tiny_config(weights_file: tuple[Path, dict[str, np.ndarray]]) -> None:
  path, _ = weights_file
  flags = [f"--{k}={v}" for k, v in vars(TINY).items()]
  res = subprocess.run([sys.executable, str(ROOT / "extra" / "examples" / "generate.py"), *flags, "--weights",
                        str(path), "--prompt", "5,17,3", "--tokens", "24", "--temperature", "0.8", "--top-k", "10",
                        "--top-p", "0.9"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
  assert res.returncode == 0, res.stdout + res.stderr
  tokens = re.search(r"tokens: ([0-9,]+)", res.stdout)
  assert tokens is not None and len(tokens.group(1).split(",")) == 24
  timing = r"decode \d+ tokens: the first two \(capture\) [0-9.]+ s, then [0-9.]+ tokens/s"
  assert re.search(timing, res.stdout), res.stdout

def test_train_gpt_samples_through_the_cache() -> None:
  # the character model of train_gpt.py decodes through generate(): greedy tokens equal those of its full forward
  import train_gpt
  Tensor.manual_seed(0)
  model = train_gpt.GPT(context=8, dim=16, layers=1, heads=2)
  prompt = [5, 9, 14]
  out = generate.generate(model, prompt, 5, lambda z: int(np.argmax(z)))
  tokens = prompt + out
  for i in range(len(prompt), len(tokens)):
    assert tokens[i] == int(np.argmax(model(Tensor([tokens[:i]], dtype="int32")).numpy()[0, -1]))
