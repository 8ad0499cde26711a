package runtime

import (
	"fmt"
	"io"
	"strings"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// DenseTensor is one tensor held in memory (little-endian bytes of DType,
// spelled as in safetensors: "F32", "BF16", "U32", ...).
type DenseTensor struct {
	DType string
	Shape []int64
	Data  []byte
}

// TensorSource supplies the dense (non-expert) tensors of a model by name.
// Read may be called once per tensor; the returned bytes must stay valid and
// unchanged for the life of the Model.
type TensorSource interface {
	Info(name string) (dtype string, shape []int64, ok bool)
	Read(name string) ([]byte, error)
}

// MapTensors is a TensorSource over tensors already in memory.
type MapTensors map[string]DenseTensor

// Info implements TensorSource.
func (m MapTensors) Info(name string) (string, []int64, bool) {
	t, ok := m[name]
	return t.DType, t.Shape, ok
}

// Read implements TensorSource.
func (m MapTensors) Read(name string) ([]byte, error) {
	t, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("tensor %s not found", name)
	}
	return t.Data, nil
}

// Model is a loaded qwen3_next / qwen3_5_moe text model.
type Model struct {
	Config  *Config
	Backend Backend
	Experts ExpertSource

	embed  mlxq.Matrix // [V, H]
	norm   []float32   // final norm (1+w)
	head   mlxq.Matrix // [V, H]; the embedding when tied
	layers []*layer
	rope   *rope
	eps    float32

	closer io.Closer   // files behind the tensors and experts, if any
	arena  *denseArena // the dense weights' memory from an Allocator, if any
}

type layer struct {
	index    int
	inNorm   []float32
	postNorm []float32
	lin      *deltaNet  // nil for a full-attention layer
	attn     *attention // nil for a DeltaNet layer
	moe      *moeBlock  // nil for a dense-MLP layer
	mlp      *denseMLP
}

type deltaNet struct {
	fused   bool
	qkvz    mlxq.Matrix // qwen3_next: [2Kd+2Vd, H], per-key-head interleaved
	ba      mlxq.Matrix // qwen3_next: [2Nv, H]
	qkv     mlxq.Matrix // qwen3_5: [2Kd+Vd, H]
	z, b, a mlxq.Matrix // qwen3_5: [Vd, H], [Nv, H], [Nv, H]
	conv    []float32   // [C][K], j = K-1 multiplies the current input
	negA    []float32   // -exp(A_log) per value head
	dtBias  []float32   // per value head
	norm    []float32   // gated norm weight [dv], plain
	out     mlxq.Matrix // [H, Vd]
	// perm maps a fused qkvz output index to its place in [q|k|v|z].
	perm, permBA []int32
}

type attention struct {
	q, k, v, o   mlxq.Matrix
	qNorm, kNorm []float32
}

type moeBlock struct {
	router     mlxq.Matrix // [E, H]
	shared     *denseMLP   // nil if there is no shared expert
	sharedGate mlxq.Matrix // [1, H]
}

type denseMLP struct {
	gate, up, down mlxq.Matrix
}

// builder turns named tensors into the model's weights, checking names,
// dtypes and shapes and naming the tensor in every error.
type builder struct {
	cfg *Config
	src TensorSource
	// arena, if set, receives the tensors the model keeps. While it has no
	// memory yet (the sizing pass), tensors are checked but not read, and
	// their sizes are added up; the weights built are empty.
	arena *denseArena
}

func (b *builder) sizing() bool { return b.arena != nil && b.arena.mem == nil }

// keep reads tensor name (size bytes, from its Info) into memory the Model
// keeps: its place in the arena if there is one, else wherever the source
// puts it.
func (b *builder) keep(name string, size int64) ([]byte, error) {
	if b.arena == nil {
		return b.src.Read(name)
	}
	dst, err := b.arena.take(size)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	if err := readInto(b.src, name, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

func (b *builder) floatType(name, dtype string) (mlxq.Float, error) {
	f, err := mlxq.FloatFromDType(dtype)
	if err != nil {
		return 0, fmt.Errorf("tensor %s: dtype %s is not a float type (want F32, F16 or BF16)", name, dtype)
	}
	return f, nil
}

func shapeString(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// vector reads a float tensor of exactly want elements (any shape whose
// product is want, e.g. [C, K, 1]) as float32.
func (b *builder) vector(name string, shape ...int64) ([]float32, error) {
	dtype, got, ok := b.src.Info(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s missing", name)
	}
	if !sameShape(got, shape) {
		return nil, fmt.Errorf("tensor %s: shape %s, want %s", name, shapeString(got), shapeString(shape))
	}
	f, err := b.floatType(name, dtype)
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if b.sizing() {
		b.arena.reserve(4 * n)
		return nil, nil
	}
	data, err := b.src.Read(name)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != n*int64(f.Size()) {
		return nil, fmt.Errorf("tensor %s: %d bytes, want %d", name, len(data), n*int64(f.Size()))
	}
	var out []float32
	if b.arena != nil {
		if out, err = b.arena.float32s(n); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
	} else {
		out = make([]float32, n)
	}
	mlxq.DecodeFloats(out, data, f)
	return out, nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (b *builder) has(name string) bool {
	_, _, ok := b.src.Info(name)
	return ok
}

// matrix loads module (a path such as "model.layers.0.mlp.gate") as a
// [rows, cols] matrix: MLX affine quantized if module.scales exists, else a
// dense float matrix.
func (b *builder) matrix(module string, rows, cols int) (mlxq.Matrix, error) {
	wname := module + ".weight"
	wtype, wshape, ok := b.src.Info(wname)
	if !ok {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s missing", wname)
	}
	if b.has(module + ".scales") {
		return b.quantized(module, rows, cols, wtype, wshape)
	}
	if !sameShape(wshape, []int64{int64(rows), int64(cols)}) {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s: shape %s, want [%d, %d]", wname, shapeString(wshape), rows, cols)
	}
	f, err := b.floatType(wname, wtype)
	if err != nil {
		return mlxq.Matrix{}, err
	}
	size := int64(rows) * int64(cols) * int64(f.Size())
	if b.sizing() {
		b.arena.reserve(size)
		return mlxq.Matrix{}, nil
	}
	data, err := b.keep(wname, size)
	if err != nil {
		return mlxq.Matrix{}, err
	}
	m, err := mlxq.NewDense(rows, cols, f, data)
	if err != nil {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s: %w", wname, err)
	}
	return m, nil
}

func (b *builder) quantized(module string, rows, cols int, wtype string, wshape []int64) (mlxq.Matrix, error) {
	wname, sname, bname := module+".weight", module+".scales", module+".biases"
	stype, sshape, _ := b.src.Info(sname)
	btype, bshape, ok := b.src.Info(bname)
	if !ok {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s has scales but no %s: only MLX affine quantization (with biases) is supported", wname, bname)
	}
	p, err := quantParams(b.cfg, module, wname, wtype, stype, btype, wshape, sshape, bshape, rows, cols)
	if err != nil {
		return mlxq.Matrix{}, err
	}
	f, _ := mlxq.FloatFromDType(stype)
	sizes := [3]int64{wshape[0] * wshape[1] * 4, sshape[0] * sshape[1] * int64(f.Size()), bshape[0] * bshape[1] * int64(f.Size())}
	if b.sizing() {
		for _, n := range sizes {
			b.arena.reserve(n)
		}
		return mlxq.Matrix{}, nil
	}
	var bufs [3][]byte
	for i, n := range []string{wname, sname, bname} {
		if bufs[i], err = b.keep(n, sizes[i]); err != nil {
			return mlxq.Matrix{}, err
		}
	}
	m, err := mlxq.NewQuantized(rows, cols, p.Bits, p.GroupSize, f, bufs[0], bufs[1], bufs[2])
	if err != nil {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s: %w", wname, err)
	}
	return m, nil
}

// quantParams resolves and cross-checks the affine parameters of one
// quantized module (weight U32 [rows, cols·bits/32], scales and biases
// [rows, cols/group] of one float type; shapes may carry leading dims, as
// for stacked experts, already stripped by the caller).
func quantParams(cfg *Config, module, wname, wtype, stype, btype string, wshape, sshape, bshape []int64, rows, cols int) (QuantParams, error) {
	p, ok := cfg.Quant.For(module)
	if !ok {
		return p, fmt.Errorf("tensor %s is quantized (%s.scales exists) but config.json declares no quantization for %s", wname, module, module)
	}
	if wtype != "U32" {
		return p, fmt.Errorf("tensor %s: quantized weight dtype %s, want U32", wname, wtype)
	}
	if _, err := mlxq.FloatFromDType(stype); err != nil {
		return p, fmt.Errorf("tensor %s.scales: dtype %s is not a float type", module, stype)
	}
	if btype != stype {
		return p, fmt.Errorf("tensor %s.biases: dtype %s differs from scales dtype %s", module, btype, stype)
	}
	if len(wshape) != 2 || len(sshape) != 2 || !sameShape(sshape, bshape) {
		return p, fmt.Errorf("tensor %s: quantized shapes weight %s scales %s biases %s, want 2-D with equal scales and biases",
			wname, shapeString(wshape), shapeString(sshape), shapeString(bshape))
	}
	wcols, scols := wshape[1], sshape[1]
	if scols <= 0 || wcols <= 0 {
		return p, fmt.Errorf("tensor %s: empty quantized shape", wname)
	}
	// bits = 32·weight_cols / (scales_cols·group)
	if 32*wcols != int64(p.Bits)*scols*int64(p.GroupSize) {
		num := 32 * wcols
		den := scols * int64(p.GroupSize)
		implied := "not an integer"
		if num%den == 0 {
			implied = fmt.Sprint(num / den)
		}
		return p, fmt.Errorf("tensor %s: config says %d bits group %d, but weight %s with scales %s implies %s bits at group %d",
			wname, p.Bits, p.GroupSize, shapeString(wshape), shapeString(sshape), implied, p.GroupSize)
	}
	if wshape[0] != int64(rows) || sshape[0] != int64(rows) || scols*int64(p.GroupSize) != int64(cols) {
		return p, fmt.Errorf("tensor %s: quantized shape %s (scales %s) is [%d, %d] dequantized, want [%d, %d]",
			wname, shapeString(wshape), shapeString(sshape), wshape[0], scols*int64(p.GroupSize), rows, cols)
	}
	return p, nil
}

// NewModel assembles a Model from a config, its dense tensors (MLX names,
// e.g. "model.layers.0.linear_attn.in_proj_qkvz.weight") and its routed
// experts. backend nil means CPU. Every tensor is checked against the config.
// If the backend implements Allocator, the dense weights are copied into
// memory from it, which Close gives back.
func NewModel(cfg *Config, tensors TensorSource, experts ExpertSource, backend Backend) (*Model, error) {
	al, _ := backend.(Allocator)
	return build(cfg, tensors, experts, backend, al)
}

// build assembles a Model from a config, its dense tensors and its experts.
// With an allocator, the dense tensors the model keeps are read into one
// allocation from it: a sizing pass checks every tensor and adds up the
// arena's size, then the tensors are read into their places.
func build(cfg *Config, src TensorSource, experts ExpertSource, backend Backend, al Allocator) (m *Model, err error) {
	if backend == nil {
		backend = CPU{}
	}
	if al == nil {
		return (&builder{cfg: cfg, src: src}).model(experts, backend)
	}
	plan := &builder{cfg: cfg, src: src, arena: &denseArena{}}
	if _, err := plan.model(experts, backend); err != nil {
		return nil, err
	}
	arena, err := newDenseArena(al, plan.arena.off)
	if err != nil {
		return nil, err
	}
	if m, err = (&builder{cfg: cfg, src: src, arena: arena}).model(experts, backend); err != nil {
		arena.free()
		return nil, err
	}
	m.arena = arena
	return m, nil
}

// model builds the Model's weights from b's tensors.
func (b *builder) model(experts ExpertSource, backend Backend) (*Model, error) {
	c := b.cfg
	cfg := c
	m := &Model{Config: cfg, Backend: backend, Experts: experts,
		rope: newRope(c.RotaryDim, c.RopeTheta), eps: float32(c.RMSNormEps)}
	var err error
	p := c.Prefix
	if m.embed, err = b.matrix(p+"embed_tokens", c.Vocab, c.Hidden); err != nil {
		return nil, err
	}
	if m.norm, err = b.vector(p+"norm.weight", int64(c.Hidden)); err != nil {
		return nil, err
	}
	headModule := strings.TrimSuffix(c.HeadPrefix, ".")
	switch {
	case b.has(headModule + ".weight"):
		if m.head, err = b.matrix(headModule, c.Vocab, c.Hidden); err != nil {
			return nil, err
		}
	case c.TieWordEmbeddings:
		m.head = m.embed
	default:
		return nil, fmt.Errorf("tensor %s.weight missing (and tie_word_embeddings is false)", headModule)
	}
	for l := 0; l < c.Layers; l++ {
		ly, err := b.layer(l)
		if err != nil {
			return nil, err
		}
		m.layers = append(m.layers, ly)
	}
	return m, nil
}

func (b *builder) layer(l int) (*layer, error) {
	c := b.cfg
	lp := fmt.Sprintf("%slayers.%d.", c.Prefix, l)
	ly := &layer{index: l}
	var err error
	H := int64(c.Hidden)
	if ly.inNorm, err = b.vector(lp+"input_layernorm.weight", H); err != nil {
		return nil, err
	}
	if ly.postNorm, err = b.vector(lp+"post_attention_layernorm.weight", H); err != nil {
		return nil, err
	}
	if c.FullAttention[l] {
		if ly.attn, err = b.attention(lp + "self_attn."); err != nil {
			return nil, err
		}
	} else if ly.lin, err = b.deltaNet(lp + "linear_attn."); err != nil {
		return nil, err
	}
	if c.Sparse[l] {
		ly.moe, err = b.moe(lp + "mlp.")
	} else {
		ly.mlp, err = b.mlp(lp+"mlp.", c.Intermediate)
	}
	if err != nil {
		return nil, err
	}
	return ly, nil
}

func (b *builder) attention(p string) (*attention, error) {
	c := b.cfg
	a := &attention{}
	qRows := c.Heads * c.HeadDim
	if c.AttnOutputGate {
		qRows *= 2
	}
	var err error
	for _, t := range []struct {
		m          *mlxq.Matrix
		name       string
		rows, cols int
	}{
		{&a.q, "q_proj", qRows, c.Hidden},
		{&a.k, "k_proj", c.KVHeads * c.HeadDim, c.Hidden},
		{&a.v, "v_proj", c.KVHeads * c.HeadDim, c.Hidden},
		{&a.o, "o_proj", c.Hidden, c.Heads * c.HeadDim},
	} {
		if *t.m, err = b.matrix(p+t.name, t.rows, t.cols); err != nil {
			return nil, err
		}
	}
	if a.qNorm, err = b.vector(p+"q_norm.weight", int64(c.HeadDim)); err != nil {
		return nil, err
	}
	if a.kNorm, err = b.vector(p+"k_norm.weight", int64(c.HeadDim)); err != nil {
		return nil, err
	}
	return a, nil
}

func (b *builder) deltaNet(p string) (*deltaNet, error) {
	c := b.cfg
	d := &deltaNet{}
	Kd, Vd, Nv := c.LinearKeyDim(), c.LinearValueDim(), c.LinValueHeads
	C := c.ConvDim()
	var err error
	switch {
	case b.has(p + "in_proj_qkvz.weight"):
		d.fused = true
		if d.qkvz, err = b.matrix(p+"in_proj_qkvz", 2*Kd+2*Vd, c.Hidden); err != nil {
			return nil, err
		}
		if d.ba, err = b.matrix(p+"in_proj_ba", 2*Nv, c.Hidden); err != nil {
			return nil, err
		}
		d.perm, d.permBA = fusedPermutation(c)
	case b.has(p + "in_proj_qkv.weight"):
		for _, t := range []struct {
			m    *mlxq.Matrix
			name string
			rows int
		}{{&d.qkv, "in_proj_qkv", C}, {&d.z, "in_proj_z", Vd}, {&d.b, "in_proj_b", Nv}, {&d.a, "in_proj_a", Nv}} {
			if *t.m, err = b.matrix(p+t.name, t.rows, c.Hidden); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("tensor %sin_proj_qkvz.weight (qwen3_next) or %sin_proj_qkv.weight (qwen3_5) missing", p, p)
	}
	// MLX stores the depthwise conv as [C, K, 1]; transformers as [C, 1, K],
	// with norms not yet shifted to 1+w, which this runner does not undo.
	convName := p + "conv1d.weight"
	if _, shape, ok := b.src.Info(convName); ok && sameShape(shape, []int64{int64(C), 1, int64(c.ConvKernel)}) && c.ConvKernel != 1 {
		return nil, fmt.Errorf("tensor %s: shape %s is the transformers layout; convert the checkpoint with mlx-lm first (MLX layout is [%d, %d, 1])",
			convName, shapeString(shape), C, c.ConvKernel)
	}
	if d.conv, err = b.vector(convName, int64(C), int64(c.ConvKernel), 1); err != nil {
		return nil, err
	}
	aLog, err := b.vector(p+"A_log", int64(Nv))
	if err != nil {
		return nil, err
	}
	d.negA = make([]float32, Nv)
	for i, v := range aLog {
		d.negA[i] = -expf(v)
	}
	if d.dtBias, err = b.vector(p+"dt_bias", int64(Nv)); err != nil {
		return nil, err
	}
	if d.norm, err = b.vector(p+"norm.weight", int64(c.LinValHeadDim)); err != nil {
		return nil, err
	}
	if d.out, err = b.matrix(p+"out_proj", c.Hidden, Vd); err != nil {
		return nil, err
	}
	return d, nil
}

// fusedPermutation maps the qwen3_next fused projections onto the
// concatenated layout. in_proj_qkvz rows are grouped per key head g:
// [q_g (dk) | k_g (dk) | v of the r = Nv/Nk value heads of g (r·dv) | z of
// those heads (r·dv)]; the destination is [q (Kd) | k (Kd) | v (Vd) | z (Vd)],
// heads ascending. in_proj_ba rows per key head: [b (r) | a (r)] → [b (Nv) | a (Nv)].
func fusedPermutation(c *Config) (perm, permBA []int32) {
	Nk, dk, dv := c.LinKeyHeads, c.LinKeyHeadDim, c.LinValHeadDim
	r := c.LinValueHeads / Nk
	Kd, Vd, Nv := c.LinearKeyDim(), c.LinearValueDim(), c.LinValueHeads
	group := 2*dk + 2*r*dv
	perm = make([]int32, Nk*group)
	for g := range Nk {
		base := g * group
		for i := range dk {
			perm[base+i] = int32(g*dk + i)
			perm[base+dk+i] = int32(Kd + g*dk + i)
		}
		for i := range r * dv {
			perm[base+2*dk+i] = int32(2*Kd + g*r*dv + i)
			perm[base+2*dk+r*dv+i] = int32(2*Kd + Vd + g*r*dv + i)
		}
	}
	permBA = make([]int32, 2*Nv)
	for g := range Nk {
		for i := range r {
			permBA[g*2*r+i] = int32(g*r + i)
			permBA[g*2*r+r+i] = int32(Nv + g*r + i)
		}
	}
	return perm, permBA
}

func (b *builder) mlp(p string, inter int) (*denseMLP, error) {
	c := b.cfg
	d := &denseMLP{}
	var err error
	if d.gate, err = b.matrix(p+"gate_proj", inter, c.Hidden); err != nil {
		return nil, err
	}
	if d.up, err = b.matrix(p+"up_proj", inter, c.Hidden); err != nil {
		return nil, err
	}
	if d.down, err = b.matrix(p+"down_proj", c.Hidden, inter); err != nil {
		return nil, err
	}
	return d, nil
}

func (b *builder) moe(p string) (*moeBlock, error) {
	c := b.cfg
	mb := &moeBlock{}
	var err error
	if mb.router, err = b.matrix(p+"gate", c.Experts, c.Hidden); err != nil {
		return nil, err
	}
	if b.has(p + "shared_expert.gate_proj.weight") {
		if c.SharedIntermediate == 0 {
			return nil, fmt.Errorf("tensor %sshared_expert.gate_proj.weight present but shared_expert_intermediate_size is 0", p)
		}
		if mb.shared, err = b.mlp(p+"shared_expert.", c.SharedIntermediate); err != nil {
			return nil, err
		}
		if mb.sharedGate, err = b.matrix(p+"shared_expert_gate", 1, c.Hidden); err != nil {
			return nil, err
		}
	} else if c.SharedIntermediate > 0 {
		return nil, fmt.Errorf("tensor %sshared_expert.gate_proj.weight missing", p)
	}
	return mb, nil
}

// Close releases the files behind the model, if any, and the memory its
// dense weights took from an Allocator. The model must not be used after.
func (m *Model) Close() error {
	var err error
	if m.closer != nil {
		err = m.closer.Close()
		m.closer = nil
	}
	if e := m.arena.free(); err == nil {
		err = e
	}
	m.arena = nil
	return err
}
