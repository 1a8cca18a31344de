// The scene records as the rasterising kernels read them (scene_access.wgsl), from a storage
// buffer: GPUs, and CPU adapters whose records outgrow a uniform binding (scene_uniform.wgsl).
@group(0) @binding(1) var<storage, read> scene: array<f32>;  // scene records (render/gpu/layouts.py SceneRecord)

fn scene_at(i: u32) -> f32 {
    return scene[i];
}
