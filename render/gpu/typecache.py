"""wgpu-py's C types, parsed in one pass instead of one pass each.

wgpu-py talks to wgpu-native through cffi's ABI mode, which turns a C type name such as
``"WGPUBufferDescriptor *"`` into a ctype the first time it is used, with pycparser -- and every such
parse re-reads a ``typedef`` line for each of the hundreds of types in ``wgpu.h``. A process's
first device and fit use about forty types, so about forty of those parses (10-20 ms each) sit
on the path of every start. :func:`prime` parses the types a fit uses in one pycparser pass and
puts them in cffi's cache under the names wgpu-py asks for, through the very steps cffi's own
``FFI.typeof`` takes (so the ctypes are the same objects cffi would have made).

It reaches into cffi's private parser: if that ever changes shape, priming does nothing and
wgpu-py parses each type on first use, as it would without this module.
"""

from __future__ import annotations

import logging

log = logging.getLogger("trifit.gpu")

#: The C types wgpu-py asks cffi for on a fit's path (device, buffers, pipelines, passes,
#: timestamps, mapping), spelled exactly as wgpu-py spells them: cffi caches by the string.
#: tests/test_typecache.py checks that a fit with every event parses none beyond these.
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
)

_primed: set[int] = set()


def prime(ffi, cdecls=FIT_CDECLS) -> int:
    """Parse ``cdecls`` (those not cached yet) in one pass into ``ffi``'s type cache; returns how many
    it added (0 when cffi's internals are not what this expects, or all were cached)."""
    try:
        with ffi._lock:
            cache = ffi._parsed_types
            todo = [c for c in dict.fromkeys(cdecls) if c not in cache]
            if not todo:
                return 0
            parser = ffi._parser
            source = "".join(f"void __trifit_prime{k}(\n{c}\n);\n" for k, c in enumerate(todo))
            ast = parser._parse(source)[0]
            found = {}
            for ext in ast.ext[len(ast.ext) - len(todo):]:
                k = int(ext.name[len("__trifit_prime"):])
                # what CParser.parse_type_and_quals and FFI._typeof_locked do with one declaration
                tp, _quals = parser._get_type_and_quals(ext.type.args.params[0].type)
                function = tp.is_raw_function
                if function:
                    tp = tp.as_function_pointer()
                found[todo[k]] = (ffi._get_cached_btype(tp), function)
            if len(found) != len(todo):
                return 0
            cache.update(found)
            return len(found)
    except Exception as exc:  # a cffi whose insides differ, or a wgpu.h without one of these types
        log.debug("cffi type priming skipped: %s: %s", type(exc).__name__, exc)
        return 0


def prime_wgpu() -> int:
    """:func:`prime` wgpu-py's ffi (once a process)."""
    from wgpu.backends.wgpu_native import ffi

    if id(ffi) in _primed:
        return 0
    _primed.add(id(ffi))
    return prime(ffi)
