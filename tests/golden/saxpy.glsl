#version 310 es
// glesc kernel: saxpy
// y[i] = a * x[i] + y[i]
precision highp float;
precision highp int;

#define WG_SIZE 256u
layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) restrict readonly buffer B0 { float x[]; };
layout(std430, binding = 1) restrict buffer B1 { float y[]; };

layout(std140, binding = 0) uniform Params {
    uint n;
    float a;
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
