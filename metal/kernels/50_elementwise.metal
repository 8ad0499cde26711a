// Element-wise kernels over rows: element i < n of row r < rows is at
// r*stride + i of each array. Grid: (n, rows) threads.

struct Elem {
    ulong a_off;
    ulong b_off;
    ulong y_off;
    uint n;
    uint rows;
    uint a_stride;
    uint b_stride;
    uint y_stride;
    uint mode;        // scale_add: 0 alpha, 1 sigmoid(b[r])
    float alpha;
    float pad;
};

// y = silu(a) * b (SwiGLU: a = gate, b = up)
kernel void swiglu(device const uchar* ab [[buffer(0)]],
                   device const uchar* bb [[buffer(1)]],
                   device uchar* yb [[buffer(2)]],
                   constant Elem& p [[buffer(3)]],
                   uint3 gid [[thread_position_in_grid]]) {
    if (gid.x >= p.n || gid.y >= p.rows) {
        return;
    }
    float a = ((device const float*)(ab + p.a_off))[ulong(gid.y) * p.a_stride + gid.x];
    float b = ((device const float*)(bb + p.b_off))[ulong(gid.y) * p.b_stride + gid.x];
    ((device float*)(yb + p.y_off))[ulong(gid.y) * p.y_stride + gid.x] = qp_silu(a) * b;
}

// y = a * sigmoid(b) (the attention output gate; the layer device uses
// the shared sigmoid_mul)
kernel void sigmoid_mul_rows(device const uchar* ab [[buffer(0)]],
                        device const uchar* bb [[buffer(1)]],
                        device uchar* yb [[buffer(2)]],
                        constant Elem& p [[buffer(3)]],
                        uint3 gid [[thread_position_in_grid]]) {
    if (gid.x >= p.n || gid.y >= p.rows) {
        return;
    }
    float a = ((device const float*)(ab + p.a_off))[ulong(gid.y) * p.a_stride + gid.x];
    float b = ((device const float*)(bb + p.b_off))[ulong(gid.y) * p.b_stride + gid.x];
    ((device float*)(yb + p.y_off))[ulong(gid.y) * p.y_stride + gid.x] = a * qp_sigmoid(b);
}

// y = a + b (the residual add)
kernel void residual_add(device const uchar* ab [[buffer(0)]],
                device const uchar* bb [[buffer(1)]],
                device uchar* yb [[buffer(2)]],
                constant Elem& p [[buffer(3)]],
                uint3 gid [[thread_position_in_grid]]) {
    if (gid.x >= p.n || gid.y >= p.rows) {
        return;
    }
    float a = ((device const float*)(ab + p.a_off))[ulong(gid.y) * p.a_stride + gid.x];
    float b = ((device const float*)(bb + p.b_off))[ulong(gid.y) * p.b_stride + gid.x];
    ((device float*)(yb + p.y_off))[ulong(gid.y) * p.y_stride + gid.x] = a + b;
}

// y += alpha * a, alpha = p.alpha (mode 0) or sigmoid(b[r]) per row (mode 1:
// the shared-expert gate, b holding one logit per row)
kernel void scale_add(device const uchar* ab [[buffer(0)]],
                      device const uchar* bb [[buffer(1)]],
                      device uchar* yb [[buffer(2)]],
                      constant Elem& p [[buffer(3)]],
                      uint3 gid [[thread_position_in_grid]]) {
    if (gid.x >= p.n || gid.y >= p.rows) {
        return;
    }
    float alpha = p.alpha;
    if (p.mode == 1) {
        alpha = qp_sigmoid(((device const float*)(bb + p.b_off))[ulong(gid.y) * p.b_stride]);
    }
    float a = ((device const float*)(ab + p.a_off))[ulong(gid.y) * p.a_stride + gid.x];
    device float* y = (device float*)(yb + p.y_off) + ulong(gid.y) * p.y_stride + gid.x;
    *y = *y + alpha * a;
}
