package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/runtime/runner"
)

func init() {
	register(&cli.Command{
		Name:      "chat",
		Usage:     "a multi-turn conversation: each turn prefills only its own tokens",
		ArgsUsage: "MODEL TURN [TURN...]",
		Description: "MODEL is a .qpack container or an MLX checkpoint directory. Each TURN is a user message; the\n" +
			"replies stream to stdout. The decode state carries over between turns: the earlier turns and the\n" +
			"assistant's replies are already in it, so a turn costs only its new tokens. A summary follows each\n" +
			"turn on stderr, or everything comes as one JSON object with --json.",
		Flags:  runFlags(),
		Action: chatAction,
	})
}

type chatTurn struct {
	User string `json:"user"`
	*runReport
}

func chatAction(c *cli.Context) error {
	l, err := parseLateFlags(c)
	if err != nil {
		return err
	}
	s, err := parseRunSettings(l, "chat")
	if err != nil {
		return err
	}
	defer s.close()
	turns := l.Args()[1:]
	if len(turns) == 0 {
		return withCode(2, fmt.Errorf("chat: want at least one TURN after MODEL"))
	}
	r, err := openRunner(s)
	if err != nil {
		return err
	}
	defer r.Close()
	out, errw := c.App.Writer, c.App.ErrWriter
	s.streamTo(out)
	sess := r.NewSession()
	var reports []chatTurn
	for i, turn := range turns {
		if !s.json {
			fmt.Fprintf(out, "> %s\n", turn)
		}
		res, err := sess.Chat(c.Context, turn, runner.ChatOptions{GenOptions: s.gen, System: s.system, EnableThinking: s.thinking()})
		if err != nil {
			return runError(s.model, err)
		}
		rep := newRunReport(r, res, s.gen.Sample)
		reports = append(reports, chatTurn{User: turn, runReport: rep})
		if !s.json {
			fmt.Fprint(out, "\n\n")
			fmt.Fprintf(errw, "[turn %d: %d tokens in the state]\n", i+1, len(sess.Tokens()))
			rep.print(errw)
		}
	}
	if s.json {
		return writeJSON(out, struct {
			Model       string     `json:"model"`
			Turns       []chatTurn `json:"turns"`
			StateTokens int        `json:"state_tokens"`
		}{s.model, reports, len(sess.Tokens())})
	}
	return nil
}
