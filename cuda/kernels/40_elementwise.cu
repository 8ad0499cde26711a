// Element-wise kernels: one thread per element.

struct Elem {
    const float* a;
    const float* b;
    float* y;
    uint n;
    uint pad;
};
QP_STATIC_ASSERT(sizeof(Elem) == 32, "Elem layout");

// y = silu(a) * b (SwiGLU: a = gate, b = up)
QP_KERNEL swiglu(Elem p) {
    qp_grid_begin();
    uint i = QP_GLOBAL_X;
    if (i >= p.n) {
        return;
    }
    p.y[i] = qp_silu(p.a[i]) * p.b[i];
}
