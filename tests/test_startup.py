"""Start-up (issue #19): wgpu-py's C types primed in one parse (render/gpu/typecache.py), the GPU
context brought up in the background (render/gpu/device.py warm_up), pipelines compiled together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import cffi
import numpy as np
import pytest


def _fresh_wgpu_ffi():
    """A new cffi FFI with wgpu-native's declarations, as wgpu-py makes its own (so priming it does not
    touch the process's shared one)."""
    from wgpu.backends.wgpu_native import _ffi

    ffi = cffi.FFI()
    ffi.cdef(_ffi.get_wgpu_header())
    return ffi


def test_primed_types_are_the_objects_cffi_itself_makes():
    from trifit.gpu import typecache

    ffi = _fresh_wgpu_ffi()
    added = typecache.prime(ffi)
    assert added == len(set(typecache.FIT_CDECLS))
    primed = {c: ffi._parsed_types[c] for c in typecache.FIT_CDECLS}
    for cdecl, (ctype, function) in primed.items():
        del ffi._parsed_types[cdecl]  # cffi's own way, one pycparser pass for this name
        own = ffi._typeof(cdecl, consider_function_as_funcptr=True)
        assert own is ctype, cdecl
        assert ffi._parsed_types[cdecl][1] == function, cdecl
    assert ffi.sizeof("WGPUBufferDescriptor") == ffi.sizeof(ffi.typeof("WGPUBufferDescriptor *").item)


def test_priming_twice_adds_nothing_and_an_unknown_type_leaves_the_cache_as_it_was():
    from trifit.gpu import typecache

    ffi = _fresh_wgpu_ffi()
    assert typecache.prime(ffi, ("WGPUBufferDescriptor *", "uint8_t []")) == 2
    assert typecache.prime(ffi, ("WGPUBufferDescriptor *", "uint8_t []")) == 0
    before = dict(ffi._parsed_types)
    # one name wgpu.h does not declare: cffi's own parse would fail on it, so priming adds none of them
    assert typecache.prime(ffi, ("WGPUTextureDescriptor *", "WGPUNoSuchThing *")) == 0
    assert ffi._parsed_types == before
    assert ffi.typeof("WGPUTextureDescriptor *").kind == "pointer"  # wgpu-py's path still works


_PARSES_OF_A_FIT = textwrap.dedent("""
    import json, sys
    import cffi.cparser as cp
    seen = []
    orig = cp.Parser.parse_type_and_quals
    def counting(self, cdecl):
        seen.append(cdecl)
        return orig(self, cdecl)
    cp.Parser.parse_type_and_quals = counting
    from trifit.gpu import typecache
    typecache.import_backend()  # wgpu-py's backend, as a fit imports it: its own two types primed first
    from wgpu.backends.wgpu_native import ffi
    at_import = len(seen)
    ffi.typeof("WGPUTextureDescriptor *")  # (a type no fit uses: the hook sees cffi's parses)
    hook_saw = seen[at_import:]
    del seen[at_import:]
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.resources import sample_path
    engine = Engine("gpu")
    target = load_image(sample_path("astronaut.png"), 48)
    # growth, pruning, respawn and sigma probes all happen within 160 iterations at this size
    fitter = Fitter(target, triangles=24, size=48, seed=0, engine=engine, strategy="default")
    fitter.run(StopConditions(iterations=160))
    engine.render(fitter.scene)
    engine.loss_and_grad(fitter.scene, target)
    json.dump({"at_import": at_import, "after_import": seen[at_import:], "iterations": fitter.iteration,
               "hook_saw": hook_saw}, sys.stdout)
""")


def test_a_fit_parses_no_c_type_beyond_the_primed_ones(gpu_ctx):
    """Every type a fit, a render and a gradient use is primed: a new wgpu-py that asks for one more
    shows here (add it to FIT_CDECLS), instead of as a silent 10-20 ms in every start."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("TRIFIT_NO_GPU", None)
    out = subprocess.run([sys.executable, "-c", _PARSES_OF_A_FIT], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["iterations"] == 160
    assert got["hook_saw"] == ["WGPUTextureDescriptor *"]
    assert got["at_import"] == 0  # the backend's own two types, primed before its module body
    assert got["after_import"] == []


def test_warm_up_brings_up_the_context_that_get_context_returns(gpu_ctx):
    """In a fresh process: warm_up() starts the device in the background and get_context() returns
    that context (one device, made once); with TRIFIT_NO_GPU it starts nothing."""
    code = textwrap.dedent("""
        import threading
        from trifit.gpu import device
        device.warm_up()
        warming = device._warming
        ctx = device.get_context()
        warming.join()
        assert ctx is device.get_context()
        device.warm_up()  # once a process
        assert device._warming is warming
        print(warming.name, threading.active_count())
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRIFIT_NO_GPU"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("trifit-gpu-warm-up")
    code = "from trifit.gpu import device; device.warm_up(); assert device._warming is None"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "TRIFIT_NO_GPU": "1"}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_imports_leave_the_environment_alone_while_the_gpu_warms(gpu_ctx):
    """The driver's start in the warm-up thread reads the environment, and glibc's getenv is not
    safe against a concurrent setenv: numpy's import, which sets and unsets OPENBLAS_MAIN_FREE
    where it is not set, made a command's start crash now and then (docs/RELIABILITY.md). In a
    fresh process, numpy imported while the GPU warms changes no environment variable."""
    code = textwrap.dedent("""
        import os
        calls = []
        put, unset = os.putenv, os.unsetenv
        os.putenv = lambda k, v: (calls.append(k), put(k, v))[1]
        os.unsetenv = lambda k: (calls.append(k), unset(k))[1]
        from trifit.gpu import device
        device.warm_up()
        assert device._warming is not None
        calls.clear()  # (from here on the driver's start may be reading the environment)
        import numpy
        device.wait_warm_up()
        print(calls)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("TRIFIT_NO_GPU", "OPENBLAS_MAIN_FREE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_a_cli_fit_with_a_bad_input_still_exits_with_one_line_and_status_2_while_the_gpu_warms(tmp_path):
    """The warm-up thread is started before the input is read: a bad image still ends the process
    with the CLI's one line and status 2, and the process ends (the thread is waited for)."""
    bad = tmp_path / "not-an-image.png"
    bad.write_bytes(b"this is not a picture")
    out = subprocess.run([sys.executable, "-m", "trifit.cli", "fit", str(bad), "--iters", "5", "-o",
                          str(tmp_path / "a.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trifit: error:"), out.stderr
    assert not (tmp_path / "a.json").exists()


# ---------------------------------------------------------------------- wgpu.h's declarations cache
def _shape(ffi, names):
    """What a cdef's declarations define, comparable across two FFIs: each type's C name, size,
    and each struct's fields with their offsets and types. The types are built from the declared
    models, as ``ffi.typeof(name)`` builds them after parsing the name: that parse re-reads every
    typedef of the header each time, so only a sample of the names goes through it, to show that
    it gives the very same types."""
    with ffi._lock:  # (cffi's own builder, which expects its lock held)
        types = {name: ffi._get_cached_btype(ffi._parser._declarations["typedef " + name][0]) for name in names}
    assert all(ffi.typeof(name) is types[name] for name in names[::20])
    out = {}
    for name in names:
        ct = types[name]
        row = [ct.cname, ct.kind]
        if ct.kind in ("struct", "union"):
            row += [ffi.sizeof(ct), [(f, d.offset, d.type.cname) for f, d in ct.fields]]
        elif ct.kind in ("primitive", "enum", "pointer"):
            row.append(ffi.sizeof(ct))
        out[name] = row
    return out


def test_declarations_from_the_cache_define_what_parsing_wgpu_h_defines(tmp_path, monkeypatch):
    from wgpu.backends.wgpu_native import _ffi

    from trifit.gpu import typecache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    header = _ffi.get_wgpu_header()
    parsed = cffi.FFI()
    assert typecache.restore_declarations(parsed, header) is None  # nothing cached yet
    parsed.cdef(header)
    typecache.store_declarations(parsed, header, typecache.parse_types(parsed, typecache.STARTUP_CDECLS))
    (stored,) = (tmp_path / "trifit").glob("wgpu-declarations-*.pickle")
    loaded = cffi.FFI()
    types = typecache.restore_declarations(loaded, header)
    assert set(types) == set(typecache.STARTUP_CDECLS)
    names = sorted(k.split(" ", 1)[1] for k in parsed._parser._declarations if k.startswith("typedef "))
    assert len(names) > 300
    assert _shape(loaded, names) == _shape(parsed, names)
    assert loaded._parser._int_constants == parsed._parser._int_constants
    # the library's functions, as the restored declarations type them
    lib_a, lib_b = parsed.dlopen(_ffi.lib_path), loaded.dlopen(_ffi.lib_path)
    assert lib_b.wgpuGetVersion() == lib_a.wgpuGetVersion() > 0
    assert lib_b.WGPUBufferUsage_MapRead == lib_a.WGPUBufferUsage_MapRead
    # the kept types prime with no parse, to the ctypes cffi's own parse makes of them
    assert typecache.prime(loaded, typecache.STARTUP_CDECLS, types) == len(typecache.STARTUP_CDECLS)
    for cdecl in typecache.STARTUP_CDECLS:
        ctype, function = loaded._parsed_types.pop(cdecl)
        assert loaded._typeof(cdecl, consider_function_as_funcptr=True) is ctype, cdecl
        assert loaded._parsed_types[cdecl][1] == function, cdecl

    # another header (another wgpu-py) misses the entry; a damaged file is not used
    assert typecache.restore_declarations(cffi.FFI(), header + "\n") is None
    stored.write_bytes(stored.read_bytes()[:1000])
    assert typecache.restore_declarations(cffi.FFI(), header) is None


_TWO_STARTS = textwrap.dedent("""
    import hashlib, json, sys
    import cffi.cparser as cp
    parses, any_parse = [], []
    orig, orig_any = cp.Parser._internal_parse, cp.Parser._parse
    def counting(self, csource):
        parses.append(len(csource))
        return orig(self, csource)
    def counting_any(self, csource):
        any_parse.append(len(csource))
        return orig_any(self, csource)
    cp.Parser._internal_parse = counting
    cp.Parser._parse = counting_any
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.resources import sample_path
    engine = Engine("gpu")
    fitter = Fitter(load_image(sample_path("chelsea.png"), 40), triangles=16, size=40, seed=3, engine=engine)
    fitter.run(StopConditions(iterations=60))
    json.dump({"big_parses": sum(n > 100000 for n in parses), "parses": len(any_parse),
               "scene": hashlib.sha256(fitter.scene.to_json().encode()).hexdigest()}, sys.stdout)
""")


def test_a_second_process_loads_wgpu_h_from_the_cache_and_fits_the_same_bytes(gpu_ctx, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRIFIT_NO_GPU"}
    env["XDG_CACHE_HOME"] = str(tmp_path)

    def start():
        out = subprocess.run([sys.executable, "-c", _TWO_STARTS], capture_output=True, text=True, env=env,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    first = start()
    assert first["big_parses"] == 1  # wgpu.h, parsed and stored
    (stored,) = (tmp_path / "trifit").glob("wgpu-declarations-*.pickle")
    second = start()
    assert second["big_parses"] == 0
    assert second["parses"] == 0  # nor any C type: they were kept with the declarations
    assert second["scene"] == first["scene"]
    stored.write_bytes(b"not a pickle")  # damaged: parsed again, and stored again
    third = start()
    assert third["big_parses"] == 1 and third["scene"] == first["scene"]
    assert start()["big_parses"] == 0


_PYCPARSER_USE = textwrap.dedent("""
    import json, sys, threading
    from trifit.gpu.typecache import prime_wgpu
    prime_wgpu()  # wgpu-py's backend, its declarations from the cache folder where they are there
    imported = "pycparser.c_parser" in sys.modules
    from wgpu.backends.wgpu_native import ffi
    import cffi.cparser
    # C types nobody primed: parsed on first use, from two threads at once
    names = ["WGPUSurfaceDescriptor *", "WGPUTextureDescriptor *", "WGPURenderPipelineDescriptor *"]
    sizes = {}
    threads = [threading.Thread(target=lambda n=n: sizes.update({n: ffi.sizeof(ffi.typeof(n).item)}))
               for n in names]
    for t in threads: t.start()
    for t in threads: t.join()
    json.dump({"imported": imported, "sizes": sizes, "parser": cffi.cparser.pycparser.CParser.__name__,
               "version": cffi.cparser.pycparser.__version__}, sys.stdout)
""")


def test_pycparser_is_imported_only_where_c_is_parsed(tmp_path):
    """With wgpu.h's declarations and the start-up C types from the cache, a process parses no C, and
    pycparser's import (its lexer's tables) waits until some C is parsed -- then it is the real module."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}

    def start():
        out = subprocess.run([sys.executable, "-c", _PYCPARSER_USE], capture_output=True, text=True, env=env,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)

    first, second = start(), start()
    assert first["imported"] and not second["imported"]  # parsed and stored; then from the cache
    import pycparser
    for got in (first, second):
        assert got["parser"] == "CParser" and got["version"] == pycparser.__version__
        assert len(got["sizes"]) == 3 and min(got["sizes"].values()) > 0
    assert second["sizes"] == first["sizes"]


def test_a_fit_loop_compiles_only_the_pipelines_not_built_yet(gpu_ctx, monkeypatch):
    """The first fit of a kernel variant compiles its pipelines on a few threads at once; a later
    fit of that variant finds them all built and starts no threads."""
    import concurrent.futures

    from trifit import Engine, Fitter, StopConditions
    from trifit.gpu import shaders

    pools = []
    real = concurrent.futures.ThreadPoolExecutor

    class Counting(real):
        def __init__(self, *args, **kw):
            pools.append(kw.get("max_workers"))
            super().__init__(*args, **kw)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Counting)
    engine = Engine("gpu", pixels_per_thread=2)  # a variant the rest of the suite does not build
    target = np.random.default_rng(0).uniform(0, 1, (20, 28, 3)).astype(np.float32)
    first = Fitter(target, triangles=8, size=28, seed=0, engine=engine)
    assert len(pools) == 1 and pools[0] > 1
    ws = first._loop.ws
    assert shaders.built(*ws._variant("adam.wgsl", "main"))
    assert ws.pipeline("adam.wgsl") is ws.pipeline("adam.wgsl")
    first.run(StopConditions(iterations=3))
    second = Fitter(target, triangles=8, size=28, seed=1, engine=engine)
    second.run(StopConditions(iterations=3))
    assert len(pools) == 1


def test_a_cache_folder_that_cannot_be_written_costs_only_the_parse(tmp_path, monkeypatch):
    from wgpu.backends.wgpu_native import _ffi

    from trifit.gpu import typecache

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    header = _ffi.get_wgpu_header()
    ffi = cffi.FFI()
    ffi.cdef(header)
    typecache.store_declarations(ffi, header)  # no error: the folder cannot be made
    assert blocker.read_text().startswith("a file")
    assert typecache.restore_declarations(cffi.FFI(), header) is None
    assert ffi.sizeof("WGPUBufferDescriptor") > 0


_FIT_AFTER_ITS_LOOP = textwrap.dedent("""
    import json, sys
    from trifit import Engine, Fitter, StopConditions, load_image
    from trifit.gpu import shaders, workspace
    from trifit.resources import sample_path
    workspace.COARSE_BIN_TESTS = int(sys.argv[1])
    shaders.SCENE_UNIFORM_BYTES = int(sys.argv[2])
    fitter = Fitter(load_image(sample_path("astronaut.png"), 176), engine=Engine("gpu"), seed=0)
    built = len(shaders._pipelines)
    paths = set()
    uniform = set()
    fitter.run(StopConditions(iterations=200),  # growth, pruning, respawn, probes
               callback=lambda progress: (paths.add(fitter._loop.shape.bin_path),
                                          uniform.add(fitter._loop.ws.scene_uniform)))
    json.dump({"built": built, "after": len(shaders._pipelines), "iterations": fitter.iteration,
               "paths": sorted(paths), "uniform": sorted(uniform)}, sys.stdout)
""")


@pytest.mark.parametrize("coarse_tests, scene_bytes", [(1_400_000, 65536), (10_000, 65536), (1_400_000, 8192)])
def test_a_fit_compiles_every_pipeline_it_uses_before_its_first_iteration(gpu_ctx, coarse_tests, scene_bytes):
    """Nothing compiles inside a fit's steps (a time-limited fit would spend its time there): its
    events included, in a fresh process -- and where its later loops take another binning path
    than its first (over-grown counts at the working size binned in two steps, as big fits are:
    here a lower threshold makes this small fit's do so), or on a CPU adapter another scene binding
    (Shape.scene_uniform: here a smaller binding leaves the over-grown counts and the probes'
    batch in storage), their pipelines too."""
    env = {k: v for k, v in os.environ.items() if k != "TRIFIT_NO_GPU"}
    out = subprocess.run([sys.executable, "-c", _FIT_AFTER_ITS_LOOP, str(coarse_tests), str(scene_bytes)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    if gpu_ctx.info.get("type") == "CPU":  # (the case each one is)
        assert got["uniform"] == ([False, True] if scene_bytes < 65536 else [True]), got["uniform"]
    assert got["iterations"] == 200 and got["built"] >= 12
    assert (got["paths"] == ["forward"]) == (coarse_tests > 100_000), got["paths"]  # (the case each one is)
    assert got["after"] == got["built"]


def test_a_quiet_fit_does_not_import_the_progress_bar(tmp_path):
    """--quiet shows no bar, and a short scripted fit does not pay for tqdm's import (its version
    lookup reads the installed packages' metadata); the summary line is a render it skips too."""
    code = textwrap.dedent(f"""
        import sys
        from trifit.cli import main
        from trifit.resources import sample_path
        out = {str(tmp_path / "a.json")!r}
        args = ["fit", str(sample_path("astronaut.png")), "--iters", "5", "--size", "24", "--tris", "4",
                "--backend", "reference", "-o", out]
        assert main(args + ["--quiet"]) == 0
        quiet = "tqdm" in sys.modules
        assert main(args) == 0
        print(quiet, "tqdm" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
    assert "PSNR" in out.stderr and out.stderr.count("trifit:") == 1  # the second fit's summary line only


def test_a_deferred_engine_makes_its_backend_after_the_fitters_host_work(gpu_ctx, monkeypatch):
    """``Engine(deferred=True)`` (what ``trifit fit`` makes) waits for the GPU only where the fitter
    makes its first loop: its targets and first triangles are prepared before, while the device
    comes up. The fit is the same to the bit as one on an engine made at once."""
    from PIL import Image

    from trifit import engine as engine_module, fitter as fitter_module
    from trifit.engine import Engine
    from trifit.fitter import Fitter
    from trifit.resources import sample_path

    order = []
    made, placed = engine_module._make_backend, fitter_module.initial_raw
    monkeypatch.setattr(engine_module, "_make_backend", lambda *a: order.append("backend") or made(*a))
    monkeypatch.setattr(fitter_module, "initial_raw", lambda *a, **k: order.append("placed") or placed(*a, **k))
    image = np.asarray(Image.open(sample_path("astronaut.png")).convert("RGB"))
    deferred = Engine("gpu", deferred=True)
    assert deferred._impl is None and order == []
    a = Fitter(image, triangles=12, size=40, seed=3, engine=deferred)
    # (then, where the adapter's type asks for replicas, their first triangles: render/replicas.py)
    assert order[:2] == ["placed", "backend"] and set(order[2:]) <= {"placed"} and deferred._impl is not None
    b = Fitter(image, triangles=12, size=40, seed=3, engine=Engine("gpu"))
    for f in (a, b):
        f.plan(60)
        f.step(60)
    sa, sb = a.scene, b.scene
    assert sa.triangles.tobytes() == sb.triangles.tobytes() and sa.background.tobytes() == sb.background.tobytes()
    assert sa.sigma == sb.sigma
    a.close()
    b.close()


def test_a_deferred_engine_raises_the_adapter_error_at_its_first_use(monkeypatch):
    """No adapter: a deferred GPU engine is made, and its first use raises the adapter error the
    engine would have raised at once (the CLI turns it into its one line and status 2)."""
    from trifit.engine import Engine
    from trifit.errors import AdapterError
    from trifit.gpu import device

    monkeypatch.setenv("TRIFIT_NO_GPU", "1")
    monkeypatch.setattr(device, "_shared", None)  # (as in a process that has made no context)
    engine = Engine("gpu", deferred=True)
    with pytest.raises(AdapterError):
        engine.counters()  # (any first use: it makes the backend)
    with pytest.raises(ValueError, match="unknown backend"):
        Engine("cuda", deferred=True)


def test_a_cli_fit_on_a_gpu_backend_with_no_adapter_is_one_line_and_status_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "trifit.cli", "fit", str(_sample("astronaut.png")), "--iters", "5",
                          "--size", "24", "--tris", "3", "--backend", "gpu", "-o", str(tmp_path / "a.json")],
                         capture_output=True, text=True, env={**os.environ, "TRIFIT_NO_GPU": "1"}, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trifit: error:") and "GPU" in lines[0], out.stderr
    assert not (tmp_path / "a.json").exists()


def _sample(name):
    from trifit.resources import sample_path

    return sample_path(name)
