// The scene records as the rasterising kernels read them (scene_access.wgsl), from a uniform
// buffer: CPU adapters (several pixels a thread) where the batch's records fit one uniform binding
// (render/gpu/workspace.py Shape.scene_uniform). On llvmpipe a storage or workgroup load whose
// index the compiler cannot prove uniform -- a loop variable is not -- runs as a loop over the
// vector's lanes, and a uniform buffer's is a gather, about a tenth of the cost
// (docs/PERFORMANCE.md, "A load's cost on llvmpipe by where it reads"). The same floats, so the
// same bits. SCENE_VEC4S (render/gpu/shaders.py) fills the binding.
@group(0) @binding(1) var<uniform> scene_u: array<vec4f, SCENE_VEC4S>;

fn scene_at(i: u32) -> f32 {
    return scene_u[i >> 2u][i & 3u];
}
