"""A fit's whole state, to resume it later exactly where it was.

A scene file holds what a fit *made*; a checkpoint holds what it *is*: every image's raw
parameters and Adam moments (as the fit loop keeps them: float32 on the GPU, float64 in the
reference), the iteration, the schedule in force, the strategy's progress (pruning begun, sigma
probes run and what they found, a sigma pinned by hand, which triangles are newcomers), the
triangles' ids, the random generators' states, the learning-rate scales, the recorded changes and
the loss history. ``Fitter.resume(image, checkpoint)`` continues from it as if the fit had only
paused: the GUI's crash restore (app/session.py) uses one so that a restored fit keeps its
iteration, sigma and optimiser state instead of starting over from the saved triangles.

On disk a checkpoint is one ``.npz`` (numpy's zip of arrays, loaded without pickle) whose
``state`` entry is the JSON part; it is written atomically, and :func:`load_checkpoint` checks
every part before anything uses it (a damaged file is a :class:`CheckpointError`, never a
half-restored fit).
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from .errors import TrifitError
from .fileutil import atomic_write_bytes
from .fitloop import FitSettings, Schedule, recorded_settings

FORMAT = "trifit-checkpoint"
VERSION = 1
#: the largest checkpoint read back (20,000 triangles' parameters and moments take ~5 MB an image,
#: plus 16 bytes an iteration of loss history)
MAX_CHECKPOINT_BYTES = 256 << 20


class CheckpointError(TrifitError):
    """A checkpoint that cannot be used (the reason in the message)."""


@dataclass
class Checkpoint:
    """``state``: the JSON-able part; ``raw``, ``m``, ``v``: (B, P) float64 parameters and Adam
    moments (float32 values for a GPU loop, float64 for the reference's); ``histories``: each
    image's (iterations int64, losses float64); ``records``: a GPU loop's (B, stride) float32
    scene records, else None."""

    state: dict
    raw: np.ndarray
    m: np.ndarray
    v: np.ndarray
    histories: list[tuple[np.ndarray, np.ndarray]]
    records: np.ndarray | None = None

    @property
    def iteration(self) -> int:
        return int(self.state["iteration"])

    @property
    def n_triangles(self) -> int:
        return int(self.state["n_triangles"])


# ---------------------------------------------------------------------- taking and restoring
def take(fit) -> Checkpoint:
    """The fitter's state now (one state readback; call it between steps, on the fitting thread)."""
    raw, m, v = fit._state()
    host = fit.host_state()
    state = {
        "format": FORMAT,
        "version": VERSION,
        "iteration": int(fit.iteration),
        "n_triangles": int(fit.n_triangles),
        "batch": int(fit.batch),
        "width": int(fit.width),
        "height": int(fit.height),
        "seeds": [int(s) for s in fit.seeds],
        "initial_settings": dict(fit._initial_settings),
        "settings": fit.settings.as_dict(),
        "schedule": _schedule_dict(host["schedule"]),
        "strategy": {"name": fit.strategy.name, **host["strategy"]},
        "coarse": bool(fit.coarse),
        "has_coarse_stage": bool(fit.has_coarse_stage),
        "full_from": int(host["full_from"]),
        "rngs": host["rngs"],
        "changes": [list(c) for c in fit.changes],
        "wall_s": float(fit.wall_s),
        "respawned": int(host["respawned"]),
        "faults": int(host["faults"]),
        "lr_scale": float(fit._lr_scale),
        "lr_fault": float(host["lr_fault"]),
        "locked": [[int(i) for i in idx] for idx in fit.locks],
        "locked_values": [vals.tolist() for vals in fit._lock_values],
    }
    ids, state["next_id"] = fit.ids_state()
    state["ids"] = [[int(i) for i in image] for image in ids]
    # copies (np.array): a view would pin the history's arrays, which then cannot grow
    histories = [(np.array(h.iterations, dtype=np.int64), np.array(h.losses, dtype=np.float64)) for h in fit.histories]
    # a GPU loop's scene records as its device computed them (the reference loop keeps none)
    records = fit._loop.records() if hasattr(fit._loop, "records") else None
    return Checkpoint(state, *(np.asarray(a, dtype=np.float64) for a in (raw, m, v)), histories, records)


def restore(fit, ck: Checkpoint) -> None:
    """Put ``ck`` into a fitter built from the same images and initial settings (Fitter._setup
    calls this in place of placing a first scene)."""
    st = ck.state
    if (fit.batch, fit.width, fit.height) != (st["batch"], st["width"], st["height"]):
        raise CheckpointError(f"the checkpoint is of {st['batch']} image(s) at {st['width']}x{st['height']}, "
                              f"not {fit.batch} at {fit.width}x{fit.height} (a different image or size?)")
    if st["strategy"]["name"] != fit.strategy.name:
        raise CheckpointError(f"the checkpoint's strategy is {st['strategy']['name']!r}, not {fit.strategy.name!r}")
    if st["has_coarse_stage"] and not fit.has_coarse_stage:
        raise CheckpointError("the checkpoint has a half-size stage this fit does not have")
    if not st["has_coarse_stage"]:
        fit._half = None  # a refit of a saved scene, or a strategy without one
    try:
        fit.restore_host_state({"strategy": st["strategy"], "schedule": _schedule_from(st["schedule"]),
                                "full_from": int(st["full_from"]), "rngs": st["rngs"],
                                "respawned": int(st["respawned"]), "faults": int(st["faults"]),
                                "lr_fault": float(st["lr_fault"])})
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"the checkpoint's schedule or strategy state is damaged ({exc})") from None
    fit.coarse = bool(st["coarse"])
    fit.changes = [list(c) for c in st["changes"]]
    fit.wall_s, fit._lr_scale = float(st["wall_s"]), float(st["lr_scale"])
    for h, (its, losses) in zip(fit.histories, ck.histories):
        h.iterations.extend(int(i) for i in its)
        h.losses.frombytes(np.ascontiguousarray(losses, dtype=np.float64).tobytes())
    _restore_locks(fit, st, ck.n_triangles)
    fit._set(ck.raw, ck.m, ck.v, ck.n_triangles, ck.iteration, exact=True)
    if "ids" in st:  # (a checkpoint from before they were kept: numbered afresh)
        try:
            fit.set_ids_state(st["ids"], int(st["next_id"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"the checkpoint's triangle ids are damaged ({exc})") from None
    if any(len(idx) for idx in fit.locks):
        fit._remember_locked_raw()
    loop = fit._loop
    if ck.records is not None and hasattr(loop, "put_records") and ck.records.shape == (fit.batch, loop.shape.scene_stride):
        loop.put_records(ck.records)  # else (another backend) the host's rounding: a ulp away
    fit._next_event = fit.strategy.next_event(ck.iteration)


def _restore_locks(fit, st: dict, n: int) -> None:
    """The locked triangles and their values (a checkpoint from before locks has none)."""
    empty = [[] for _ in range(fit.batch)]
    try:
        idx = [np.asarray(i, dtype=np.int64).reshape(-1) for i in st.get("locked", empty)]
        vals = [np.asarray(v, dtype=np.float64).reshape(-1, 10) for v in st.get("locked_values", empty)]
        if len(idx) != fit.batch or len(vals) != fit.batch or any(
                len(i) != len(v) or np.any(i < 0) or np.any(i >= n) or np.any(np.diff(i) <= 0) for i, v in zip(idx, vals)):
            raise ValueError("one sorted list of triangle indices and their values per image expected")
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the checkpoint's locked triangles are damaged ({exc})") from None
    fit.lock(idx, vals)


def settings_of(ck: Checkpoint) -> tuple[FitSettings, FitSettings]:
    """(the settings the fit began with, the settings in force now)."""
    return _settings(ck.state["initial_settings"]), _settings(ck.state["settings"])


# ---------------------------------------------------------------------- files
def _arrays(ck: Checkpoint) -> dict[str, np.ndarray]:
    """``ck`` as the arrays of its file (the state as UTF-8 JSON bytes)."""
    arrays = {"state": np.frombuffer(json.dumps(ck.state, allow_nan=False).encode("utf-8"), dtype=np.uint8),
              "raw": ck.raw, "m": ck.m, "v": ck.v}
    if ck.records is not None:
        arrays["records"] = ck.records
    for b, (its, losses) in enumerate(ck.histories):
        arrays[f"iterations_{b}"], arrays[f"losses_{b}"] = its, losses
    return arrays


def check_checkpoint(ck: Checkpoint, name: str = "the checkpoint") -> Checkpoint:
    """An in-memory checkpoint checked by the rules a loaded file passes (:func:`load_checkpoint`):
    :class:`CheckpointError` says what is wrong with one whose parts were changed or disagree."""
    try:
        arrays = _arrays(ck)
    except (TypeError, ValueError, RecursionError) as exc:  # a state JSON cannot hold
        raise CheckpointError(f"{name} has no readable state ({exc})") from None
    return _checked(arrays, name)


def save_checkpoint(ck: Checkpoint, path) -> Path:
    """Write ``ck`` to ``path`` atomically (a ``.npz``)."""
    path = Path(path)
    buf = io.BytesIO()
    np.savez(buf, **_arrays(ck))
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_checkpoint(path) -> Checkpoint:
    """Read and check a checkpoint; :class:`CheckpointError` says what is wrong with a bad one."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CHECKPOINT_BYTES:
            raise CheckpointError(f"{path.name} is larger than a checkpoint can be")
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except CheckpointError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise CheckpointError(f"cannot read {path.name}: {exc}") from None
    return _checked(data, path.name)


def _checked(data: dict, name: str) -> Checkpoint:
    try:
        state = json.loads(bytes(data["state"].astype(np.uint8)).decode("utf-8"))
    except (KeyError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CheckpointError(f"{name} has no readable state ({exc})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{name} is not a trifit checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(f"{name} has version {state.get('version')!r}, this software reads {VERSION}")
    try:
        batch, n, it = (int(state[k]) for k in ("batch", "n_triangles", "iteration"))
        arrays = [np.asarray(data[k]) for k in ("raw", "m", "v")]
        histories = [(np.asarray(data[f"iterations_{b}"], dtype=np.int64), np.asarray(data[f"losses_{b}"], dtype=np.float64))
                     for b in range(batch)]
        for key in ("width", "height", "full_from", "respawned", "faults"):
            int(state[key])
        bool(state["coarse"]) and bool(state["has_coarse_stage"])
        for key in ("wall_s", "lr_scale", "lr_fault"):
            float(state[key])
        _settings(state["initial_settings"])
        _settings(state["settings"])
        _schedule_from(state["schedule"])
        if not isinstance(state["strategy"], dict) or not isinstance(state["changes"], list):
            raise ValueError("strategy or changes of the wrong type")
        if len(state["rngs"]) != batch or len(state["seeds"]) != batch:
            raise ValueError("one random generator and seed per image expected")
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{name} is incomplete or damaged ({type(exc).__name__}: {exc})") from None
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays):
        raise CheckpointError(f"{name}: parameters and Adam moments disagree (shapes "
                              f"{', '.join(str(a.shape) for a in arrays)})")
    if batch < 1 or n < 1 or it < 0 or len(shape) != 2 or shape[0] != batch or shape[1] < n * 10:
        raise CheckpointError(f"{name}: parameters of shape {shape} do not fit {batch} image(s) of {n} triangles")
    if any(a.dtype != np.float64 or not np.all(np.isfinite(a)) for a in arrays):
        raise CheckpointError(f"{name}: parameters must be finite float64")
    if any(len(its) != len(losses) for its, losses in histories):
        raise CheckpointError(f"{name}: a loss history's iterations and losses differ in length")
    records = np.asarray(data["records"]) if "records" in data else None
    if records is not None and (records.dtype != np.float32 or records.ndim != 2 or records.shape[0] != batch):
        raise CheckpointError(f"{name}: scene records of shape {records.shape} do not fit {batch} image(s)")
    return Checkpoint(state, *arrays, histories, records)


def _schedule_dict(schedule: Schedule) -> dict:
    d = asdict(schedule)
    if d.get("sigma_ends") is not None:
        d["sigma_ends"] = [float(x) for x in d["sigma_ends"]]
    return d


def _schedule_from(d: dict) -> Schedule:
    d = dict(d)
    if d.get("sigma_ends") is not None:
        d["sigma_ends"] = tuple(float(x) for x in d["sigma_ends"])
    return Schedule(**d)


def _settings(d: dict) -> FitSettings:
    known = {f.name for f in fields(FitSettings)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}")
    return FitSettings(**recorded_settings(d))


__all__ = ["Checkpoint", "CheckpointError", "check_checkpoint", "load_checkpoint", "save_checkpoint", "settings_of", "take"]
