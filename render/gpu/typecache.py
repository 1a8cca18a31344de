"""What wgpu-py's C bindings parse at start-up, parsed once.

wgpu-py talks to wgpu-native through cffi's ABI mode, which parses with pycparser at run time:

- importing its backend parses all of ``wgpu.h`` (``ffi.cdef``). :func:`import_backend` keeps
  what that parse produces -- cffi's declarations, plain Python objects -- in the user's cache
  folder, keyed by the header's text and the versions of cffi, pycparser and Python; later
  processes load it instead of parsing;
- each C type name it uses, such as ``"WGPUBufferDescriptor *"``, is parsed on first use, and
  every such parse re-reads a ``typedef`` line for each of the hundreds of types in ``wgpu.h``. The
  backend's import uses two and a first device and fit about fifty. :func:`parse_types` parses
  them in one pass into cffi's model types, which the cache keeps with the declarations;
  :func:`prime` puts them in cffi's cache under the names wgpu-py asks for, through the steps
  cffi's own ``FFI.typeof`` takes (so the ctypes are the objects cffi would have made), before the
  backend's module body asks for its first. A later process parses no C at all.

Together they were a good part of a short fit's start (docs/PERFORMANCE.md). Both reach into cffi's
private parser: where it has changed shape (a parser attribute this module does not know of, a
load that fails) they do nothing, and wgpu-py parses as it would without this module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import pickle
import sys
import tempfile
import threading
import types
from pathlib import Path

log = logging.getLogger("trifit.gpu")

#: The C types wgpu-py asks cffi for on a fit's path (device, buffers, pipelines, passes,
#: timestamps, mapping), spelled exactly as wgpu-py spells them: cffi caches by the string.
#: tests/test_startup.py checks that a fit with every event parses none beyond these.
FIT_CDECLS = (
    "WGPUStringView *", "WGPUInstanceExtras *", "WGPUInstanceDescriptor *", "WGPUChainedStruct *",
    "WGPUChainedStruct * ", "WGPURequestAdapterOptions *",
    "void(WGPURequestAdapterStatus, WGPUAdapter, WGPUStringView, void *, void *)",
    "WGPURequestAdapterCallbackInfo *", "WGPUAdapterInfo *", "WGPUNativeLimits *", "WGPULimits *",
    "char []", "WGPUQueueDescriptor *", "WGPUDeviceExtras *",
    "void(WGPUDevice const *, WGPUDeviceLostReason, WGPUStringView, void *, void *)",
    "WGPUDeviceLostCallbackInfo *",
    "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)",
    "WGPUUncapturedErrorCallbackInfo *", "WGPUFeatureName[]", "WGPUDeviceDescriptor *",
    "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
    "WGPURequestDeviceCallbackInfo *", "WGPUBufferDescriptor *", "WGPUShaderSourceWGSL *",
    "WGPUShaderModuleDescriptor *", "WGPUComputeState *", "WGPUComputePipelineDescriptor *",
    "WGPUBindGroupEntry *", "WGPUBindGroupEntry[]", "WGPUBindGroupDescriptor *",
    "WGPUBindGroupLayoutEntry *", "WGPUBindGroupLayoutEntry[]", "WGPUBindGroupLayoutDescriptor *",
    "WGPUBindGroupLayout[]", "WGPUPipelineLayoutDescriptor *",
    "WGPUCommandEncoderDescriptor *", "WGPUComputePassDescriptor *", "WGPUPassTimestampWrites *",
    "uint32_t []", "WGPUCommandBufferDescriptor *", "WGPUCommandBuffer[]",
    "void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)", "WGPUBufferMapCallbackInfo *",
    "intptr_t", "uintptr_t", "WGPUQuerySetDescriptor *", "uint8_t []", "uint8_t *",
    "void(WGPUQueueWorkDoneStatus, void *, void *)", "WGPUQueueWorkDoneCallbackInfo *",
    "void *",  # (render/gpu/readback.py: a map request's number as the callback's userdata)
)

#: The C types wgpu-py's backend parses while it imports (its log callback's, and the empty and
#: null strings it keeps): primed with FIT_CDECLS as soon as wgpu.h's declarations are in, so the
#: import's own two parses -- each a pass over every typedef name -- find them parsed.
IMPORT_CDECLS = ("void(WGPULogLevel, WGPUStringView, void *)", "WGPUStringView *")
#: what the declarations' cache keeps parsed, and the import primes
STARTUP_CDECLS = tuple(dict.fromkeys(IMPORT_CDECLS + FIT_CDECLS))

_primed: set[int] = set()


def parse_types(ffi, cdecls) -> dict:
    """``cdecls`` parsed in one pass into cffi's model types, ``{cdecl: (type, is_function)}``, as
    ``FFI.typeof`` would parse each (empty when cffi's internals are not what this expects, or a
    name is not declared)."""
    try:
        with ffi._lock:
            return _parse_types_locked(ffi, list(dict.fromkeys(cdecls)))
    except Exception as exc:  # a cffi whose insides differ, or a wgpu.h without one of these types
        log.debug("cffi type parse skipped: %s: %s", type(exc).__name__, exc)
        return {}


def _parse_types_locked(ffi, todo: list[str]) -> dict:
    if not todo:
        return {}
    parser = ffi._parser
    source = "".join(f"void __trifit_prime{k}(\n{c}\n);\n" for k, c in enumerate(todo))
    ast = parser._parse(source)[0]
    found = {}
    for ext in ast.ext[len(ast.ext) - len(todo):]:
        k = int(ext.name[len("__trifit_prime"):])
        # what CParser.parse_type_and_quals and FFI._typeof_locked do with one declaration
        tp, _quals = parser._get_type_and_quals(ext.type.args.params[0].type)
        function = tp.is_raw_function
        found[todo[k]] = (tp.as_function_pointer() if function else tp, function)
    return found if len(found) == len(todo) else {}


def prime(ffi, cdecls=FIT_CDECLS, parsed: dict | None = None) -> int:
    """Put ``cdecls`` (those not cached yet) into ``ffi``'s type cache, from ``parsed`` (model types
    of :func:`parse_types`, kept with wgpu.h's declarations) or parsed in one pass; returns how
    many it added (0 when cffi's internals are not what this expects, or all were cached)."""
    try:
        with ffi._lock:
            cache = ffi._parsed_types
            todo = [c for c in dict.fromkeys(cdecls) if c not in cache]
            if not todo:
                return 0
            types = {c: parsed[c] for c in todo if parsed and c in parsed}
            missing = [c for c in todo if c not in types]
            if missing:
                more = _parse_types_locked(ffi, missing)
                if not more:
                    return 0
                types.update(more)
            # (the ctypes FFI._typeof_locked makes of them)
            cache.update({c: (ffi._get_cached_btype(tp), function) for c, (tp, function) in types.items()})
            return len(types)
    except Exception as exc:  # a cffi whose insides differ, or a wgpu.h without one of these types
        log.debug("cffi type priming skipped: %s: %s", type(exc).__name__, exc)
        return 0


def prime_wgpu() -> int:
    """Import wgpu-py's backend (:func:`import_backend`) and :func:`prime` its ffi (once a process)."""
    import_backend()
    from wgpu.backends.wgpu_native import ffi

    if id(ffi) in _primed:
        return 0
    _primed.add(id(ffi))
    return prime(ffi)


# ---------------------------------------------------------------------- wgpu.h's declarations
#: The cffi parser's attributes a cdef fills (and that the cache holds); the others are a parse's
#: scratch (pycparser nodes, the options and position of the parse under way), set afresh by each.
_PARSER_STATE = ("_anonymous_counter", "_declarations", "_included_declarations", "_int_constants",
                 "_recomplete", "_uses_new_feature")
_PARSER_SCRATCH = ("_options", "_structnode2type", "_inside_extern_python", "_partial_length")
_CACHE_FORMAT = 2  # (2: with the start-up C types' model types)


def cache_dir() -> Path:
    """Where trifit keeps what it can rebuild: ``$XDG_CACHE_HOME/trifit`` (``~/.cache/trifit``;
    ``%LOCALAPPDATA%\\trifit`` on Windows, ``~/Library/Caches/trifit`` on macOS)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base and os.name == "nt":
        base = os.environ.get("LOCALAPPDATA")
    if not base:
        base = str(Path.home() / ("Library/Caches" if sys.platform == "darwin" else ".cache"))
    return Path(base) / "trifit"


def _declarations_path(csource: str) -> Path:
    import cffi

    key = hashlib.sha256("\0".join((str(_CACHE_FORMAT), cffi.__version__, _pycparser_version(), sys.version,
                                     csource, *STARTUP_CDECLS)).encode()).hexdigest()[:24]
    return cache_dir() / f"wgpu-declarations-{key}.pickle"


def _pycparser_version() -> str:
    """pycparser's version, as a digest of its package's ``__init__.py`` (where ``__version__`` is
    set), without importing it (:class:`_Deferred`)."""
    spec = importlib.util.find_spec("pycparser")
    origin = getattr(spec, "origin", None)
    try:
        return hashlib.sha256(Path(origin).read_bytes()).hexdigest() if origin else "none"
    except OSError:
        return "unreadable"


class _Deferred(types.ModuleType):
    """Stands in for pycparser in cffi's parser module, which imports it when wgpu-py makes its
    FFI but uses it only to parse C: with wgpu.h's declarations and the C types from the cache a
    process parses none, and pycparser's import (its lexer's tables; ~0.02 s on a lent H200's
    host) would delay the GPU's start for nothing. The first attribute asked for imports the real
    module, once, under a lock, and takes its names."""

    def __getattr__(self, name):
        with _deferred_lock:
            if "CParser" not in vars(self):
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                real = importlib.import_module(self.__name__)
                vars(self).update(vars(real))
        return object.__getattribute__(self, name)


_deferred_lock = threading.Lock()


def _defer_pycparser() -> _Deferred | None:
    """A :class:`_Deferred` pycparser in sys.modules for cffi's parser module to import, where
    neither is imported yet (else None)."""
    if "pycparser" in sys.modules or "cffi.cparser" in sys.modules:
        return None
    spec = importlib.util.find_spec("pycparser")
    if spec is None:
        return None
    stub = _Deferred("pycparser")
    stub.__spec__ = spec  # (what find_spec answers while the stub is in sys.modules)
    sys.modules["pycparser"] = stub
    return stub


def _parser_fits(parser) -> bool:
    """The parser has the attributes this module knows, and no other."""
    names = set(vars(parser))
    return set(_PARSER_STATE) <= names <= set(_PARSER_STATE + _PARSER_SCRATCH)


def restore_declarations(ffi, csource: str) -> dict | None:
    """Load ``csource``'s declarations into ``ffi`` (one with none yet) from the cache, as its
    ``cdef(csource)`` would have made them; returns the start-up C types kept with them (model
    types for :func:`prime`, from the same pickle so they share its declarations' objects), or
    None when there is no usable cache entry."""
    parser = ffi._parser
    if parser._declarations or not _parser_fits(parser):
        return None
    try:
        stored = pickle.loads(_declarations_path(csource).read_bytes())
    except FileNotFoundError:
        return None
    except Exception as exc:  # a damaged file: parse, and store it again
        log.debug("wgpu declarations cache unreadable: %s: %s", type(exc).__name__, exc)
        return None
    if not isinstance(stored, dict) or set(stored) != {"parser", "types"}:
        return None
    state, types = stored["parser"], stored["types"]
    if not isinstance(state, dict) or set(state) != set(_PARSER_STATE) or state["_recomplete"] \
            or not isinstance(types, dict):
        return None
    with ffi._lock:
        for name in _PARSER_STATE:
            setattr(parser, name, state[name])
        ffi._cdef_version = object()  # what cdef does besides parsing (render/gpu/typecache.py)
        ffi._cdefsources.append(csource)
    return types


def store_declarations(ffi, csource: str, types: dict | None = None) -> None:
    """Keep ``ffi``'s declarations, just made by ``cdef(csource)`` alone, for later processes, with
    ``types`` (:func:`parse_types` of them) -- written whole or not at all; a folder that cannot
    be written to is left alone."""
    parser = ffi._parser
    if not _parser_fits(parser) or parser._recomplete:
        return
    path = _declarations_path(csource)
    try:
        blob = pickle.dumps({"parser": {name: getattr(parser, name) for name in _PARSER_STATE},
                             "types": dict(types or {})}, protocol=pickle.HIGHEST_PROTOCOL)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception as exc:
        log.debug("wgpu declarations not cached: %s: %s", type(exc).__name__, exc)


def import_backend() -> None:
    """Import wgpu-py's wgpu-native backend, its ``wgpu.h`` declarations from the cache where they
    are there (and put there where they are not), and the C types it and a fit use primed before
    its module body asks for any (:func:`prime`: from the cache too, else in one parse)."""
    if "wgpu.backends.wgpu_native" in sys.modules:
        return
    import cffi

    original = cffi.FFI.cdef

    def cdef(self, csource, override=False, **options):
        if override or options or not isinstance(csource, str) or "wgpuCreateInstance" not in csource:
            return original(self, csource, override=override, **options)
        types = restore_declarations(self, csource)
        if types is None:
            fresh = not self._parser._declarations
            original(self, csource)
            types = parse_types(self, STARTUP_CDECLS)
            if fresh:
                store_declarations(self, csource, types)
        if prime(self, STARTUP_CDECLS, types):  # (before the import's own parses: see IMPORT_CDECLS)
            _primed.add(id(self))

    cffi.FFI.cdef = cdef
    stub = _defer_pycparser()
    try:
        import wgpu.backends.wgpu_native  # noqa: F401
    finally:
        cffi.FFI.cdef = original
        if stub is not None and sys.modules.get("pycparser") is stub:
            del sys.modules["pycparser"]  # (a later import gets the real module; cffi's keeps the stub)
