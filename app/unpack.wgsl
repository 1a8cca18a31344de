// Unpack the fitter's image (storage buffer, float32 rgb interleaved, W*H*3 floats from `first`) into an
// rgba8 texture the display pass can sample with hardware filtering. One thread per pixel; it
// runs on the device right before a draw that has a new frame, so nothing is read back.
// struct Size (the uniform) is generated from app/panes.py UNPACK_SIZE (render/gpu/layouts.py).

@group(0) @binding(0) var<uniform> size: Size;
@group(0) @binding(1) var<storage, read> source: array<f32>;
@group(0) @binding(2) var destination: texture_storage_2d<rgba8unorm, write>;

@compute @workgroup_size(8, 8, 1)
fn unpack(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= size.width || id.y >= size.height) {
        return;
    }
    let i = size.first + (id.y * size.width + id.x) * 3u;
    let rgb = clamp(vec3<f32>(source[i], source[i + 1u], source[i + 2u]), vec3<f32>(0.0), vec3<f32>(1.0));
    textureStore(destination, vec2<i32>(id.xy), vec4<f32>(rgb, 1.0));
}
