"""The wgpu engine: device, buffer pool, shaders, and the batched forward/loss/backward passes."""
