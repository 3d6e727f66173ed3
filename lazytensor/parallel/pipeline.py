"""Pipeline parallelism over a mesh axis ("pp"): schedules as data, run by one runner.

A model is cut into stages, a list of layers each; stage s lives on the devices at index s along the pipeline axis of
the mesh (one device, or, on a mesh with more axes, the devices that differ from it along the others, over which each
micro-batch is split: data parallel inside the stage). A batch is cut into micro-batches, and a `Schedule` says, for
each stage, the order of its actions on them:

* F(i): the forward of micro-batch i through the stage's layers; its output moves to the next stage's devices;
* B(i): the backward of micro-batch i: the gradient of the stage's input (moved to the previous stage's devices), and,
  unless the schedule splits the backward, the gradients of the stage's weights;
* W(i): in a split schedule, the gradients of the stage's weights for micro-batch i, computed from the gradients of
  the layers' outputs that B(i) kept (so W repeats none of B's work), at any time after B(i): zero-bubble schedules
  put them where the stage would otherwise wait.

`gpipe`, `one_f_one_b` and `zero_bubble_h1` build the three classic schedules; `Schedule.chart()` draws one (a row per
stage, a column per unit of time) and `Schedule.bubble_fraction()` is its idle share with unit costs (F, B and W one
unit each; an unsplit B, which is B and W, two), which is (p-1)/(m+p-1) for GPipe and 1F1B and (p-1)/(3m+p-1) for
ZB-H1 (m >= p), p stages and m micro-batches. `Pipeline.step` builds each action lazily, in the order of their start
times on the timeline (`Schedule.order`), and realizes it without waiting for it (engine/realize.deferred): its steps
go to its stage's devices' queues (engine/queues.py; QUEUES=0 runs them in order on the calling thread), where each
waits only for the steps that made what it reads. So a stage starts an action as soon as its previous one and what it
needs are done, whatever the other stages run (an F beside another stage's two-unit B, as the timeline has it), and
the calling thread builds and schedules the next actions while the workers run the last ones. A value sent to a stage
is copied at the start of the action that takes it, on that stage's queue. Each stage runs its actions in the
schedule's order, and one is submitted only once its stage's action two before it is done (IN_FLIGHT): memory is
allocated as a step is submitted, so a stage holds at most one action's memory more than the schedule (a stage
further ahead would hold every micro-batch's activations); the data moved are the schedule's, and the results are
bit-identical to running the actions one at a time. Beyond those waits the calling thread waits once, at the step's
end, where a failure in a worker is raised. The gradients accumulate into each weight's `.grad` (as backward's), so
any optimizer steps them.

A stage holds a micro-batch's activations (each layer's input and output) from its F to the end of its B, or of its W
in a split schedule, for which B keeps the gradients of the outputs of the layers with weights:
`Schedule.peak_activations()` counts them, m micro-batches' on every stage for GPipe, p-s on stage s for 1F1B, p for
ZB-H1. So nothing else may hold them: what a stage sends (its output, its input's gradient, the loss) is a copy of the
realized value, not of the graph that computed it (whose realized nodes hold their buffers, the activations, as long
as the copy lives: the losses to the step's end), and each .grad is kept as its value (a weight's first gradient of a
step is a gradient tensor, which keeps the graph that computed it). Measured in order over 2 stages, 8 micro-batches
of 128 rows through 4 x Linear(64, 64) (a micro-batch's activations 128 KB on either stage), the peaks (stage 0 /
stage 1) are GPipe 1.18 / 1.23 MB, 1F1B 0.43 / 0.33 MB and ZB-H1 0.43 / 0.50 MB: besides what every schedule holds
(B's gradients, the .grads: GPipe's less its 8 micro-batches', 0.14 / 0.18 MB), 1F1B holds 2.25 / 1.17 micro-batches'
activations and ZB-H1 2.25 / 2.43 (the schedules' 2 / 1 and 2 / 2, and a .grad with the gradient added to it; on
ZB-H1's stage 1 the output gradients the deferred W reads), where the runner before held 7 on either stage.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lazytensor.engine import realize
from lazytensor.engine.queues import Ticket
from lazytensor.frontend.mixin.multi import DeviceMesh
from lazytensor.frontend.tensor import Tensor
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import collectives
from lazytensor.runtime.device import Device
from lazytensor.uop.graph import multi_leaves

Layer = Callable[[Tensor], Tensor]

# the actions of a stage submitted to its devices' queues and not yet waited for: the one its devices run and the one
# queued behind it, so the workers never wait for the calling thread to build the next, and a stage holds the memory
# of at most one action more than running them one at a time would
IN_FLIGHT = 2

@dataclass(frozen=True)
class Action:
  """One step of a stage: `kind` "F" (forward), "B" (backward: input gradient, and weight gradient unless split) or "W"
  (weight gradient), on micro-batch `microbatch`."""
  kind: str
  microbatch: int

  def __str__(self) -> str: return f"{self.kind}{self.microbatch}"

def _deps(stage: int, stages: int, a: Action) -> list[tuple[int, Action]]:
  """The actions (stage, action) that must be done before `a` runs on `stage`."""
  if a.kind == "F": return [(stage - 1, a)] if stage > 0 else []
  if a.kind == "B": return [(stage, Action("F", a.microbatch))] + ([(stage + 1, a)] if stage < stages - 1 else [])
  return [(stage, Action("B", a.microbatch))]

@dataclass(frozen=True)
class Schedule:
  """Per stage, the actions it runs in order. split_backward: B is only the input gradient, and each micro-batch has a
  W; otherwise B is the whole backward. Checked when made: each stage runs F and B (and W when split) once for each
  micro-batch, and the stages' orders can all run (no stage waits on an action that waits on it)."""
  name: str
  microbatches: int
  actions: tuple[tuple[Action, ...], ...]
  split_backward: bool = False
  starts: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

  def __post_init__(self) -> None:
    kinds = ("F", "B", "W") if self.split_backward else ("F", "B")
    want = sorted((k, i) for k in kinds for i in range(self.microbatches))
    for s, row in enumerate(self.actions):
      if sorted((a.kind, a.microbatch) for a in row) != want:
        raise ValueError(f"Schedule {self.name!r}: stage {s} runs {' '.join(map(str, row))}; expected each of "
                         f"{'/'.join(kinds)} once for each of the {self.microbatches} micro-batches")
    object.__setattr__(self, "starts", self._timeline())

  @property
  def stages(self) -> int: return len(self.actions)

  def cost(self, a: Action) -> int:
    """An action's duration in units: F, B and W one each; a B that is the whole backward (B and W) two."""
    return 2 if a.kind == "B" and not self.split_backward else 1

  def _timeline(self) -> tuple[tuple[int, ...], ...]:
    """Each action's start: as early as its stage is free and what it needs is done."""
    p = self.stages
    done: dict[tuple[int, Action], int] = {}
    starts: list[list[int]] = [[] for _ in range(p)]
    free, moved = [0] * p, True
    while moved:
      moved = False
      for s in range(p):
        while len(starts[s]) < len(self.actions[s]):
          a = self.actions[s][len(starts[s])]
          if any(d not in done for d in _deps(s, p, a)): break
          t = max([free[s], *(done[d] for d in _deps(s, p, a))])
          starts[s].append(t)
          done[(s, a)] = free[s] = t + self.cost(a)
          moved = True
    stuck = [f"stage {s} at {row[len(r)]}" for s, (row, r) in enumerate(zip(self.actions, starts)) if len(r) < len(row)]
    if stuck:
      raise ValueError(f"Schedule {self.name!r} cannot run: {', '.join(stuck)} waits on an action that never comes")
    return tuple(tuple(r) for r in starts)

  def makespan(self) -> int:
    """The units of time from the first action to the last one's end."""
    return max(t + self.cost(a) for row, ts in zip(self.actions, self.starts) for a, t in zip(row, ts))

  def bubble_fraction(self) -> float:
    """The share of the stages' time spent waiting, with unit costs.

    >>> round(gpipe(4, 8).bubble_fraction(), 4), round(zero_bubble_h1(4, 8).bubble_fraction(), 4)
    (0.2727, 0.1111)
    """
    busy = sum(self.cost(a) for row in self.actions for a in row)
    return 1 - busy / (self.stages * self.makespan())

  def peak_activations(self) -> tuple[int, ...]:
    """Per stage, the most micro-batches whose activations it holds at once: from the start of F(i) to the end of
    B(i), or of W(i) in a split schedule (W reads the layers' inputs, and B keeps for it the gradients of the outputs
    of the layers with weights). GPipe holds m on every stage, 1F1B p-s on stage s, ZB-H1 p on every one (its
    deferred W's hold them past B).

    >>> gpipe(4, 8).peak_activations(), one_f_one_b(4, 8).peak_activations(), zero_bubble_h1(4, 8).peak_activations()
    ((8, 8, 8, 8), (4, 3, 2, 1), (4, 4, 4, 4))
    """
    ends = "W" if self.split_backward else "B"
    out = []
    for row in self.actions:
      held = most = 0
      for a in row:
        held += 1 if a.kind == "F" else -1 if a.kind == ends else 0
        most = max(most, held)
      out.append(most)
    return tuple(out)

  def chart(self) -> str:
    """The timeline as text: a row per stage, a column per unit of time ("." waiting).

    >>> print(one_f_one_b(2, 3).chart())
    1F1B, 2 stages, 3 micro-batches: bubble 25.0%
    stage 0 | F0 F1 .  .  B0 B0 F2 B1 B1 .  B2 B2
    stage 1 | .  F0 B0 B0 F1 B1 B1 F2 B2 B2 .  .
    """
    width = len(str(self.microbatches - 1)) + 2
    rows = []
    for s, (row, ts) in enumerate(zip(self.actions, self.starts)):
      cells = ["."] * self.makespan()
      for a, t in zip(row, ts):
        for u in range(self.cost(a)): cells[t + u] = str(a)
      rows.append(f"stage {s:<{len(str(self.stages - 1))}} | " + "".join(c.ljust(width) for c in cells).rstrip())
    head = f"{self.name}, {self.stages} stages, {self.microbatches} micro-batches: bubble {self.bubble_fraction():.1%}"
    return "\n".join([head, *rows])

  def order(self) -> list[tuple[int, Action]]:
    """Every action, as (stage, action), by its start on the timeline (stages in order at one time): what an action
    needs ends before it starts, so it comes earlier, and each stage's actions come in the schedule's order. The
    runner builds and submits them in this order.

    >>> " ".join(f"{s}:{a}" for s, a in one_f_one_b(2, 3).order())
    '0:F0 0:F1 1:F0 1:B0 0:B0 1:F1 1:B1 0:F2 0:B1 1:F2 1:B2 0:B2'
    """
    return [(s, a) for _, s, a in sorted(((t, s, a) for s, (row, ts) in enumerate(zip(self.actions, self.starts))
                                          for a, t in zip(row, ts)), key=lambda e: e[:2])]

def _check_sizes(stages: int, microbatches: int, what: str) -> None:
  for name, v in (("stages", stages), ("microbatches", microbatches)):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
      raise ValueError(f"{what}: {name} must be a positive int, got {v!r}")

def gpipe(stages: int, microbatches: int) -> Schedule:
  """GPipe: every stage runs all the forwards, then all the backwards (each micro-batch's activations are held until
  its backward: m of them)."""
  _check_sizes(stages, microbatches, "gpipe")
  row = tuple(Action(k, i) for k in ("F", "B") for i in range(microbatches))
  return Schedule("GPipe", microbatches, (row,) * stages)

def one_f_one_b(stages: int, microbatches: int) -> Schedule:
  """1F1B (PipeDream-Flush): stage s runs p-s-1 forwards, then alternates one forward and one backward, then the last
  backwards: the bubble of GPipe, with at most p-s micro-batches' activations held instead of m."""
  _check_sizes(stages, microbatches, "one_f_one_b")
  rows = []
  for s in range(stages):
    warm = min(stages - s - 1, microbatches)
    row = [Action("F", i) for i in range(warm)]
    for i in range(microbatches - warm): row += [Action("F", warm + i), Action("B", i)]
    row += [Action("B", i) for i in range(microbatches - warm, microbatches)]
    rows.append(tuple(row))
  return Schedule("1F1B", microbatches, tuple(rows))

def zero_bubble_h1(stages: int, microbatches: int) -> Schedule:
  """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): 1F1B with the backward split into B (input gradient) and W
  (weight gradient). Stage s runs p-s-1 forwards, then s pairs of F and B whose W it defers, then F B W triples, then
  B W pairs, then the deferred W's, which fill the end of the pipeline where 1F1B waits: with unit costs the bubble is
  a third of 1F1B's. At most p-s micro-batches wait for their B, as in 1F1B, but a W deferred past B holds its
  micro-batch's activations: p micro-batches' on every stage, 1F1B's most (on stage 0)."""
  _check_sizes(stages, microbatches, "zero_bubble_h1")
  return Schedule("ZB-H1", microbatches, tuple(_zb_h1_row(s, stages, microbatches) for s in range(stages)),
                  split_backward=True)

def _zb_h1_row(s: int, stages: int, microbatches: int) -> tuple[Action, ...]:
  taken = {"F": 0, "B": 0, "W": 0}  # the micro-batches each kind of action has run
  row: list[Action] = []
  def run(kinds: str) -> None:
    for k in kinds:
      row.append(Action(k, taken[k]))
      taken[k] += 1
  for _ in range(min(stages - s - 1, microbatches)): run("F")
  for _ in range(min(s, microbatches - taken["F"])): run("FB")
  while taken["F"] < microbatches: run("FBW")
  while taken["B"] < microbatches: run("BW")
  while taken["W"] < microbatches: run("W")
  return tuple(row)

# ---- the runner ----

Devices = str | tuple[str, ...]

def _stage_devices(mesh: DeviceMesh, axis: str, index: int) -> Devices:
  """The devices at `index` along the mesh axis `axis`, in the mesh's order (one device: its name)."""
  k = mesh.names.index(axis)
  group = tuple(d for c, d in enumerate(Device.flat(mesh.devices)) if collectives.unravel(mesh.shape, c)[k] == index)
  return group[0] if len(group) == 1 else group

def _move(t: Tensor, devices: Devices) -> Tensor:
  """t (on one stage's devices) on another stage's devices, split along dimension 0 if several: piece i of t so split
  goes from its device to devices[i]. (A tensor-parallel layer's input gradient comes laid out on its stage's mesh,
  whole along "tp": it is split first.)"""
  if isinstance(devices, str): return t.to(devices)
  split = t.shard(Device.flat(t.device), axis=0)
  return collectives.from_pieces([Tensor(u).to(d) for u, d in zip(multi_leaves(split.lazydata), devices)], axis=0)

def _value(t: Tensor) -> Tensor:
  """Realized t's value as a tensor of its own: its buffers, without the graph that computed it (which a tensor that
  requires grad keeps for backward) or a link to t (which detach keeps)."""
  return Tensor(t.lazydata)

def _place(t: Tensor, devices: Devices) -> Tensor:
  """A micro-batch (on any one device) on a stage's devices: split along dimension 0 over several."""
  return t.to(devices) if isinstance(devices, str) else t.shard(devices, axis=0)

@dataclass
class _Work:
  """What one stage holds of one micro-batch between its actions: each layer's input (a leaf) and output, the gradient
  of each output that B found (for W), the gradient of the stage's output that the next stage sent."""
  inputs: list[Tensor] = field(default_factory=list)
  outputs: list[Tensor] = field(default_factory=list)
  output_grads: list[Tensor | None] = field(default_factory=list)
  received: Tensor | None = None

class Pipeline:
  """A model cut into `stages` (each a list of layers: callables from a Tensor to a Tensor, whose weights are found as
  nn.state.get_parameters finds them), stage s on the devices at index s along the mesh axis `axis`. The weights are
  moved there now (replicated over a stage's devices). `loss_fn(output, target)` is the loss of one micro-batch, a
  mean over its rows; the loss of a batch is the mean of its micro-batches' losses, so the gradients are those of
  loss_fn over the whole batch, as on one device.

  >>> from lazytensor import DeviceMesh, nn
  >>> from lazytensor.parallel.pipeline import Pipeline, one_f_one_b
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("pp",))
  >>> l1, l2 = nn.Linear(4, 8), nn.Linear(8, 2)
  >>> pipe = Pipeline([[l1, Tensor.relu], [l2]], mesh, lambda out, y: (out - y).square().mean())
  >>> opt = nn.optim.SGD(nn.state.get_parameters([l1, l2]), lr=0.1)  # which makes the weights require grad
  >>> loss = pipe.step(Tensor.ones(6, 4), Tensor.zeros(6, 2), one_f_one_b(2, 3))
  >>> opt.step()
  >>> l1.weight.device, l2.weight.grad.device
  ('CPU', 'CPU:1')
  """
  def __init__(self, stages: Sequence[Sequence[Layer]], mesh: DeviceMesh, loss_fn: Callable[[Tensor, Tensor], Tensor],
               axis: str = "pp") -> None:
    if not isinstance(mesh, DeviceMesh): raise TypeError(f"Pipeline: expected a DeviceMesh, got {mesh!r}")
    if axis not in mesh.names:
      raise ValueError(f"Pipeline: the pipeline axis {axis!r} is not an axis of the mesh; its axes are {mesh.names}")
    if len(stages) != mesh.axis_size(axis):
      raise ValueError(f"Pipeline: {len(stages)} stages for the {mesh.axis_size(axis)} devices along {axis!r} of the "
                       f"mesh; expected one stage per device along it")
    self.layers = [list(layers) for layers in stages]
    self.loss_fn = loss_fn
    self.devices = [_stage_devices(mesh, axis, s) for s in range(len(stages))]
    self.params = [[get_parameters(layer) for layer in layers] for layers in self.layers]
    for ps, devices in zip(self.params, self.devices):
      for p in (p for layer in ps for p in layer):
        # a weight already on the stage's devices (laid out by tensor parallelism on a mesh of them) keeps its layout
        if Device.flat(p.device) != Device.flat(devices): p.to_(devices).realize()

  def step(self, x: Tensor, y: Tensor, schedule: Schedule) -> Tensor:
    """One batch through the pipeline by `schedule`: its mean loss (realized, on the last stage's devices), with the
    gradients of every weight that requires grad accumulated into its .grad (as backward's)."""
    self._check(x, y, schedule)
    m, size = schedule.microbatches, x.shape[0] // schedule.microbatches
    work = [[_Work() for _ in range(m)] for _ in self.layers]
    for i in range(m): work[0][i].received = _place(x[i * size:(i + 1) * size], self.devices[0])
    targets = [_place(y[i * size:(i + 1) * size], self.devices[-1]) for i in range(m)]
    losses: list[Tensor] = []
    submitted: list[deque[Ticket]] = [deque() for _ in self.layers]  # per stage, its actions not known done
    with realize.deferred() as queues:
      for s, a in schedule.order():
        # a stage runs ahead of its work by IN_FLIGHT actions at most: each action's memory is allocated when it is
        # submitted, so a stage that ran further ahead would hold more than the schedule says (1F1B's stage 0 in the
        # test's setting, stage 1 slow: 2.33 MB with no bound, 0.73 with 3 in flight, 0.46 with 2, 0.43 in order)
        if len(submitted[s]) == IN_FLIGHT: queues.wait(submitted[s].popleft())
        self._action(s, a, work, targets, schedule, losses)
        submitted[s].append(queues.latest(Device.flat(self.devices[s])))
      loss = sum(losses[1:], losses[0]).realize()
    return loss

  def _action(self, s: int, a: Action, work: list[list[_Work]], targets: list[Tensor], schedule: Schedule,
              losses: list[Tensor]) -> None:
    """Stage s's action a, built lazily and realized (inside step's deferred block: without waiting for it). What it
    sends to a neighbouring stage is moved lazily from the realized value, so the copy runs at the start of the action
    that takes it, on its queue."""
    w, i = work[s][a.microbatch], a.microbatch
    last = s == len(self.layers) - 1
    if a.kind == "F":
      out = self._forward(s, w, targets[i] if last else None, schedule.microbatches)
      if last: losses.append(out)
      else: work[s + 1][i].received = _move(out, self.devices[s + 1])
    elif a.kind == "W": self._weights(s, w)
    elif (grad := self._backward(s, w, weights=not schedule.split_backward)) is not None:
      work[s - 1][i].received = _move(grad, self.devices[s - 1])

  def _check(self, x: Tensor, y: Tensor, schedule: Schedule) -> None:
    if not isinstance(schedule, Schedule): raise TypeError(f"Pipeline.step: expected a Schedule, got {schedule!r}")
    if schedule.stages != len(self.layers):
      raise ValueError(f"Pipeline.step: the schedule {schedule.name!r} has {schedule.stages} stages, the pipeline "
                       f"{len(self.layers)}")
    if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
      raise ValueError(f"Pipeline.step: inputs of shape {x.shape} and targets of shape {y.shape} must have one batch "
                       "dimension (the first) of the same size")
    if x.shape[0] % schedule.microbatches:
      raise ValueError(f"Pipeline.step: a batch of {x.shape[0]} does not split into {schedule.microbatches} "
                       "micro-batches of one size")

  def _forward(self, s: int, w: _Work, target: Tensor | None, microbatches: int) -> Tensor:
    """F: the stage's layers, each on its input as a leaf of its own (so that B and W differentiate one layer at a
    time); on the last stage the loss (a share 1/m of the batch's) is a last layer. Realizes the layers' outputs and
    returns the last one's value."""
    h = w.received
    assert h is not None, "a forward before its input arrived"
    w.received = None
    layers: list[Layer] = list(self.layers[s])
    if target is not None: layers.append(lambda out: self._loss(out, target) / microbatches)
    for layer in layers:
      data = s == 0 and not w.inputs  # the batch itself gets no gradient (and token ids, integers, can have none)
      w.inputs.append(h.detach() if data else h.detach().requires_grad_())
      h = layer(w.inputs[-1])
      w.outputs.append(h)
    Tensor.realize(*w.outputs)
    return _value(h)

  def _loss(self, out: Tensor, target: Tensor) -> Tensor:
    loss = self.loss_fn(out, target)
    if not isinstance(loss, Tensor) or loss.numel() != 1:
      raise ValueError(f"Pipeline: loss_fn must return a one-element Tensor (the mean loss of a micro-batch), got "
                       f"{loss.shape if isinstance(loss, Tensor) else type(loss).__name__}")
    return loss

  def _backward(self, s: int, w: _Work, weights: bool) -> Tensor | None:
    """B: the gradient of the stage's input (None on the first stage, whose input is data), layer by layer from the
    last, keeping the gradient of each layer's output for W; with `weights`, the weights' gradients too (B and W in
    one), after which the micro-batch's activations are let go. Realizes them; returns that input gradient's value."""
    grad, w.received = w.received, None
    grads: list[Tensor] = []
    for k in reversed(range(len(w.outputs))):
      w.output_grads.insert(0, grad)
      params = self._trained(s, k) if weights else []
      inputs = [w.inputs[k]] if k > 0 or s > 0 else []  # the first stage's input is data: no gradient
      if not inputs and not params: continue
      got = w.outputs[k].gradient(*inputs, *params, gradient=grad)
      grads += self._accumulate(params, got[len(inputs):])
      if inputs: grad = got[0]
    # each layer's output gradient is realized, as the layers below and W read it (left lazy, the kernels that read it
    # would each compute it again: 2.6x the flops of a 1F1B step here); W needs those of the layers it differentiates
    made = [g for g in (grad, *w.output_grads, *grads) if isinstance(g, Tensor)]
    kept = [g if self._trained(s, k) and not weights else None for k, g in enumerate(w.output_grads)]
    if weights: w.inputs, w.outputs = [], []  # what the gradients do not read is let go before they are computed
    if made: Tensor.realize(*made)
    w.output_grads = [None if g is None else _value(g) for g in kept]
    if weights: self._own_grads(s)
    return _value(grad) if s > 0 and grad is not None else None

  def _weights(self, s: int, w: _Work) -> None:
    """W: the weights' gradients of each layer from the gradient of its output that B kept, realized; then the
    micro-batch's activations are let go."""
    grads = []
    for k in range(len(self.params[s])):
      if not (params := self._trained(s, k)): continue
      grads += self._accumulate(params, w.outputs[k].gradient(*params, gradient=w.output_grads[k]))
    w.inputs, w.outputs, w.output_grads = [], [], []  # what the gradients do not read is let go before they run
    if grads: Tensor.realize(*grads)
    self._own_grads(s)

  def _own_grads(self, s: int) -> None:
    """Each .grad of stage s as its value. A weight's first gradient of the step is a gradient tensor, which keeps the
    graph that computed it (autograd's guard against differentiating through it), and with it the activations of
    the micro-batch (a sum of two keeps none)."""
    for p in (p for k in range(len(self.params[s])) for p in self._trained(s, k)):
      if p.grad is not None: p.grad = _value(p.grad)

  def _trained(self, s: int, k: int) -> list[Tensor]:
    """The weights of layer k of stage s that get gradients (requires_grad, as backward's; the loss has none)."""
    return [p for p in self.params[s][k] if p.requires_grad] if k < len(self.params[s]) else []

  @staticmethod
  def _accumulate(params: Sequence[Tensor], grads: Sequence[Tensor]) -> list[Tensor]:
    """Each weight's .grad plus its gradient from one micro-batch: the new .grads."""
    out = []
    for p, g in zip(params, grads):
      p.grad = g if p.grad is None else p.grad + g
      out.append(p.grad)
    return out
