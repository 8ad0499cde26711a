package modelconfig

import "fmt"

// ShapeOf returns the shape of a checkpoint tensor, ok false when there is
// no tensor of that name.
type ShapeOf func(name string) (shape []int64, ok bool)

// CheckTensors checks the config against a checkpoint's tensors where the
// two must agree and a reader could not otherwise tell which is wrong: the
// embedding and LM head rows against vocab_size, the routers' rows against
// num_experts. Quantized matrices keep their row count, so the check holds
// for them too. Absent tensors are not reported (the loaders name those).
func (c *Config) CheckTensors(file string, shape ShapeOf) error {
	p := &problems{file: file}
	rows := func(name, field string, want int) {
		s, ok := shape(name)
		if !ok {
			return
		}
		if len(s) < 1 || s[0] != int64(want) {
			p.add(field, "%d, but tensor %s has shape %v", want, name, s)
		}
	}
	field := func(k string) string {
		if c.Nested {
			return "text_config." + k
		}
		return k
	}
	rows(c.Prefix+"embed_tokens.weight", field("vocab_size"), c.Vocab)
	if !c.TieWordEmbeddings {
		rows(c.HeadPrefix+"weight", field("vocab_size"), c.Vocab)
	}
	if g, ok := c.Extra.(*Gemma4); ok {
		g.checkTensors(c, p, field, shape)
		return p.err()
	}
	for l, sparse := range c.Sparse {
		if n := len(p.list); sparse {
			rows(fmt.Sprintf("%slayers.%d.mlp.gate.weight", c.Prefix, l), field("num_experts"), c.Experts)
			if len(p.list) > n {
				break // one layer is enough to name
			}
		}
	}
	return p.err()
}
