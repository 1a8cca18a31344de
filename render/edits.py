"""Edits by hand (issue 20): delete triangles, set one triangle's numbers, put triangles back,
lock by id -- and picking the triangles a click or a rectangle names.

An edit is a JSON-able dict, applied by :meth:`trifit.Fitter.edit` between chunks and recorded
in the scene's ``meta.changes`` as ``[iteration, "edit", payload]`` in its *index form*:

    {"op": "delete", "indices": [i, ...]}
    {"op": "set", "index": i, "values": [x0, y0, x1, y1, x2, y2, r, g, b, a]}
    {"op": "insert", "indices": [i, ...], "values": [[10 numbers], ...], "locked": [i, ...]}

Indices are painting-order positions when the edit applies (an insert's: where the triangles
end up, ascending; ``locked``: those of them that are locked at their values). A replay of a
scene's changes applies the same payloads at the same iterations, so it gives the same bytes.

A front end that asks for an edit some chunks before it applies (the GUI) names triangles by
*id* instead (``FitState.triangle_ids_all``: growth, pruning and respawn renumber triangles but
keep their ids): ``{"op": "delete", "ids": [...]}``, ``{"op": "set", "id": k, "values": [...]}``,
``{"op": "insert", "ids": [...], "below": [id or -1, ...], "hint": [index, ...], "values": [...],
"locked": [bool, ...]}`` (each goes back above the triangle it lay on, else at its old index) and
``{"op": "lock", "ids": [...]}`` (lock exactly these). :func:`resolve` turns them into the index
form (or a "locked" change) against the fit as it is then; ids that are gone by then are left out.

The mechanics keep parameters and Adam moments consistent, as the strategy's operations do: a
deleted triangle's moments go with it, a set or inserted triangle starts with zero moments, and
the locks' indices follow (a deleted locked triangle is no longer locked; a locked triangle that
is set keeps its lock at the new numbers).
"""

from __future__ import annotations

import numpy as np

from .fitloop import raw_triangles
from .limits import MAX_TRIANGLES_FIT, is_whole
from .reference import signed_distance, vertices_px

#: the smallest share of a pixel's colour a triangle must give there to be picked by a click
MIN_VISIBLE = 0.02
OPS = ("delete", "set", "insert")


# ---------------------------------------------------------------------- payloads
def _values(v, what: str) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] != 10:
        raise ValueError(f"{what}: a triangle is 10 numbers, got shape {np.shape(v)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: every number must be finite")
    if a[:, 6:].min() < 0 or a[:, 6:].max() > 1:
        raise ValueError(f"{what}: colours and opacity must be in [0, 1]")
    return a


def _indices(v, n: int, what: str) -> list[int]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                                                   for i in v):
        raise ValueError(f"{what}: a list of triangle indices, got {v!r}")
    out = sorted(int(i) for i in v)
    if len(set(out)) != len(out) or (out and (out[0] < 0 or out[-1] >= n)):
        raise ValueError(f"{what}: indices must be distinct and in [0, {n}), got {list(v)}")
    return out


def check(payload: dict, n_triangles: int) -> dict:
    """An index-form edit for a fit of ``n_triangles``, checked and normalised (sorted indices,
    float lists); ValueError names what is wrong."""
    if not isinstance(payload, dict) or payload.get("op") not in OPS:
        raise ValueError(f"an edit is a dict with op one of {', '.join(OPS)}, got {payload!r:.80}")
    op = payload["op"]
    if op == "delete":
        idx = _indices(payload.get("indices"), n_triangles, "delete")
        if not idx:
            raise ValueError("delete: no triangles named")
        if len(idx) >= n_triangles:
            raise ValueError("delete: a fit keeps at least one triangle")
        return {"op": op, "indices": idx}
    if op == "set":
        i = payload.get("index")
        if not is_whole(i) or not 0 <= i < n_triangles:
            raise ValueError(f"set: index must be in [0, {n_triangles}), got {i!r}")
        return {"op": op, "index": int(i), "values": _values(payload.get("values"), "set")[0].tolist()}
    raw = payload.get("indices")
    values = _values(payload.get("values"), "insert")
    final = n_triangles + len(values)
    if final > MAX_TRIANGLES_FIT:
        raise ValueError(f"insert: {final} triangles would be more than a fit's {MAX_TRIANGLES_FIT}")
    idx = _indices(raw, final, "insert")
    if len(idx) != len(values) or list(raw) != idx:
        raise ValueError("insert: one ascending index per triangle")
    locked = _indices(payload.get("locked", []), final, "insert locked")
    if not set(locked) <= set(idx):
        raise ValueError("insert: 'locked' names triangles it does not insert")
    return {"op": op, "indices": idx, "values": values.tolist(), "locked": locked}


# ---------------------------------------------------------------------- ids -> indices
def resolve(fit, request: dict) -> tuple[str, object] | None:
    """The change (kind, value) that does ``request`` to ``fit`` now: an index-form edit as it
    is, an id-form one in the index form (against the first image's ids), a lock as a
    "locked" change; None when none of the triangles it names is there any more."""
    if not isinstance(request, dict):
        raise ValueError(f"an edit is a dict (render/edits.py), got {type(request).__name__}")
    if "ids" not in request and "id" not in request:
        return "edit", request
    try:
        return _resolve_ids(fit, request)
    except (KeyError, TypeError) as exc:  # (a key missing, or ids that are not numbers)
        raise ValueError(f"{request.get('op')!r:.20} edit by id: {type(exc).__name__} {exc}"[:160]) from None


def _resolve_ids(fit, request: dict) -> tuple[str, object] | None:
    ids = [int(k) for k in fit.triangle_ids_all()[0]]
    where = {int(k): i for i, k in enumerate(ids)}
    op = request.get("op")
    if op == "lock":
        return "locked", sorted(where[int(k)] for k in request["ids"] if int(k) in where)
    if op == "delete":
        idx = sorted(where[int(k)] for k in request["ids"] if int(k) in where)
        return ("edit", {"op": "delete", "indices": idx}) if idx else None
    if op == "set":
        i = where.get(int(request["id"]))
        return None if i is None else ("edit", {"op": "set", "index": i, "values": request["values"]})
    if op == "insert":
        return "edit", _insert_positions(ids, request)
    raise ValueError(f"unknown edit {op!r}")


def _insert_positions(ids: list[int], request: dict) -> dict:
    """An id-form insert's index form: each triangle, in the order given, above the triangle it
    lay on (``below``; -1: at the bottom) or, when that one is gone, at its old index ``hint``."""
    order: list = list(ids)
    new = []
    for k, (below, hint) in enumerate(zip(request["below"], request["hint"])):
        at = order.index(int(below)) + 1 if int(below) in order else (0 if int(below) < 0 else min(int(hint), len(order)))
        marker = ("new", k)
        order.insert(at, marker)
        new.append(marker)
    final = {m: order.index(m) for m in new}
    ranked = sorted(range(len(new)), key=lambda k: final[new[k]])
    values = [request["values"][k] for k in ranked]
    locks = request.get("locked") or [False] * len(new)
    return {"op": "insert", "indices": [final[new[k]] for k in ranked], "values": values,
            "locked": [final[new[k]] for k in ranked if locks[k]], "ids": [int(request["ids"][k]) for k in ranked]}


# ---------------------------------------------------------------------- the mechanics
def apply(fit, payload: dict) -> dict:
    """Do the index-form edit ``payload`` to every image of ``fit`` (a FitState); returns it
    normalised (what the fitter records)."""
    ids_wanted = payload.get("ids") if payload.get("op") == "insert" else None
    edit = check(payload, fit.n_triangles)
    T, op = fit.n_triangles, edit["op"]
    parts = fit._split()  # [(triangles (B, T, 10), rest)] of raw, m, v
    ids = fit.triangle_ids_all()
    locks, lock_values = [i.copy() for i in fit.locks], [v.copy() for v in fit._lock_values]
    if op == "delete":
        keep = np.setdiff1d(np.arange(T), edit["indices"])
        new_index = np.full(T, -1, dtype=np.int64)
        new_index[keep] = np.arange(len(keep))
        for b in range(fit.batch):
            stay = new_index[locks[b]] >= 0
            locks[b], lock_values[b] = new_index[locks[b][stay]], lock_values[b][stay]
            ids[b] = ids[b][keep]
        parts = [(tri[:, keep], rest) for tri, rest in parts]
        n = len(keep)
    elif op == "set":
        i = edit["index"]
        row = np.asarray(edit["values"], dtype=np.float64)
        parts = [(tri.copy(), rest) for tri, rest in parts]
        for j, (tri, _) in enumerate(parts):
            tri[:, i] = raw_triangles(row) if j == 0 else 0.0
        for b in range(fit.batch):
            lock_values[b][locks[b] == i] = row
        n = T
    else:
        idx = np.asarray(edit["indices"], dtype=np.int64)
        rows = np.asarray(edit["values"], dtype=np.float64)
        n = T + len(idx)
        old = np.setdiff1d(np.arange(n), idx)  # where the triangles there are now go
        out = []
        for j, (tri, rest) in enumerate(parts):
            grown = np.zeros((fit.batch, n, 10))
            grown[:, old] = tri
            grown[:, idx] = raw_triangles(rows) if j == 0 else 0.0
            out.append((grown, rest))
        parts = out
        fresh = np.asarray(ids_wanted, dtype=np.int64) if ids_wanted is not None else None
        for b in range(fit.batch):
            moved = old[locks[b]]
            extra = np.asarray(edit["locked"], dtype=np.int64)
            order = np.argsort(np.concatenate([moved, extra]), kind="stable")
            locks[b] = np.concatenate([moved, extra])[order]
            lock_values[b] = np.concatenate([lock_values[b], rows[np.searchsorted(idx, extra)]])[order]
            grown_ids = np.empty(n, dtype=np.int64)
            grown_ids[old] = ids[b]
            taken = set(ids[b].tolist())
            usable = fresh is not None and b == 0 and len(fresh) == len(idx) and not taken & set(fresh.tolist())
            grown_ids[idx] = fresh if usable else fit._new_ids(len(idx))
            ids[b] = grown_ids
        if any(len(i) > fit.settings.triangles for i in locks):
            raise ValueError(f"insert: more than the {fit.settings.triangles} triangles the fit keeps would be locked")
    fit.locks, fit._lock_values, fit.tri_ids = locks, lock_values, ids
    fit._join(parts, n)
    return edit


# ---------------------------------------------------------------------- picking
def pick(tris: np.ndarray, sigma: float, width: int, height: int, x: float, y: float,
         min_visible: float = MIN_VISIBLE) -> int | None:
    """The topmost triangle under the point ``(x, y)`` (normalised frame coordinates) that shows
    there: the point is inside it and it gives at least ``min_visible`` of the pixel's colour
    (its opacity x coverage x what the triangles above let through), in the model's float64
    arithmetic at the frame's size. None when no triangle shows there."""
    tris = np.asarray(tris, dtype=np.float64).reshape(-1, 10)
    if not len(tris):
        return None
    d, _ = signed_distance(vertices_px(tris, width, height), np.array([x * width]), np.array([y * height]), False)
    d = d[:, 0]
    sigma_px = sigma * min(width, height)
    with np.errstate(over="ignore"):
        alpha = tris[:, 9] / (1.0 + np.exp(-d / sigma_px))
    through = np.concatenate([np.cumprod((1.0 - alpha)[::-1])[::-1][1:], [1.0]])  # transmittance above each
    for i in range(len(tris) - 1, -1, -1):
        if d[i] >= 0 and alpha[i] * through[i] >= min_visible:
            return i
    return None


def pick_rect(tris: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> list[int]:
    """Every triangle whose centroid lies in the rectangle (normalised frame coordinates, any
    corner order), in painting order."""
    tris = np.asarray(tris, dtype=np.float64).reshape(-1, 10)
    cx, cy = tris[:, 0:6:2].mean(axis=1), tris[:, 1:6:2].mean(axis=1)
    lo_x, hi_x, lo_y, hi_y = min(x0, x1), max(x0, x1), min(y0, y1), max(y0, y1)
    return np.flatnonzero((cx >= lo_x) & (cx <= hi_x) & (cy >= lo_y) & (cy <= hi_y)).tolist()


def moved(values, dx: float, dy: float, vertex: int | None = None) -> list[float]:
    """A triangle's numbers with every vertex (or only ``vertex``, 0-2) moved by (dx, dy)."""
    out = [float(v) for v in values]
    for k in range(3) if vertex is None else (vertex,):
        out[2 * k] += dx
        out[2 * k + 1] += dy
    return out
