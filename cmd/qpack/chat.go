package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/qpack-go/qpack/runtime/runner"
)

func init() {
	register(&cli.Command{
		Name:      "chat",
		Usage:     "a multi-turn conversation: each turn prefills only its own tokens",
		ArgsUsage: "MODEL [TURN...]",
		Description: "MODEL is a .qpack container, an MLX checkpoint directory, or a Hub repository id (org/name) whose\n" +
			"checkpoint is in the Hugging Face cache. Each TURN is a user message; the replies stream to stdout. The\n" +
			"decode state carries over between turns: the earlier turns and the assistant's replies are already in it,\n" +
			"so a turn costs only its new tokens. A summary follows each turn on stderr, or everything comes as one JSON\n" +
			"object with --json. A model without a chat template gets its turns in ChatML (with a warning).\n\n" +
			"Without TURN arguments the turns come from standard input, one line each: on a terminal this is an\n" +
			"interactive conversation (a \">> \" prompt; Ctrl-C stops the reply, not the program; Ctrl-C twice at the\n" +
			"prompt exits 130; Ctrl-D ends it); from a pipe or file each line is a turn. Either way the line /reset\n" +
			"starts a new conversation, /exit (or the end of the input) ends it and empty lines are skipped. Outside\n" +
			"an interactive conversation Ctrl-C stops the reply, prints the summary so far and exits 130.",
		Flags:  runFlags(),
		Action: chatAction,
	})
}

type chatTurn struct {
	User string `json:"user"`
	*runReport
}

// chatRun is one conversation's state in the command: the session, the
// options of every turn and the reports so far.
type chatRun struct {
	s       *runSettings
	r       *runner.Runner
	sess    *runner.Session
	reports []chatTurn
}

// turn runs one user message; a Result with an error is an interrupted
// turn, whose report is kept.
func (cr *chatRun) turn(ctx context.Context, user string) (*runReport, error) {
	s := cr.s
	opt := runner.ChatOptions{GenOptions: s.gen, System: s.system, EnableThinking: s.thinking()}
	ids, _ := cr.sess.ChatPrompt(user, opt) // what Chat prefills (it changes nothing)
	res, err := cr.sess.Chat(ctx, user, opt)
	if res == nil {
		return nil, runError(s.model, err)
	}
	rep := newRunReport(cr.r, res, s.gen.Sample)
	rep.Sampling, rep.ChatTemplate, rep.PromptIDs = s.sampling, s.template, ids
	rep.Backend = describeBackend(s.backend)
	cr.reports = append(cr.reports, chatTurn{User: user, runReport: rep})
	return rep, err
}

func (cr *chatRun) writeJSON(c *cli.Context) error {
	turns := cr.reports
	if turns == nil {
		turns = []chatTurn{}
	}
	return writeJSON(c.App.Writer, struct {
		Model       string     `json:"model"`
		ModelPath   string     `json:"model_path"`
		Turns       []chatTurn `json:"turns"`
		StateTokens int        `json:"state_tokens"`
	}{cr.s.ref.Arg, cr.s.model, turns, len(cr.sess.Tokens())})
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
	r, err := openRunner(s)
	if err != nil {
		return err
	}
	defer r.Close()
	if !s.template {
		// The supported models are Qwen's, whose turns are ChatML; --system
		// and --no-think apply to it as to their templates.
		slog.Warn("the model has no chat template: turns are written in ChatML", "model", s.model)
	}
	s.streamTo(c.App.Writer)
	cr := &chatRun{s: s, r: r, sess: r.NewSession()}
	if err := c.Context.Err(); err != nil {
		return interrupted(err) // Ctrl-C while the model loaded
	}
	if turns := l.Args()[1:]; len(turns) > 0 {
		err = cr.argTurns(c, turns)
	} else {
		err = cr.stdinTurns(c)
	}
	if s.json {
		if jerr := cr.writeJSON(c); jerr != nil && err == nil {
			err = jerr
		}
	}
	return interrupted(err)
}

// argTurns runs the TURN arguments in order; Ctrl-C stops the reply and
// ends the conversation.
func (cr *chatRun) argTurns(c *cli.Context, turns []string) error {
	out, errw := c.App.Writer, c.App.ErrWriter
	for i, turn := range turns {
		if !cr.s.json {
			fmt.Fprintf(out, "> %s\n", turn)
		}
		rep, err := cr.turn(c.Context, turn)
		if rep == nil {
			return err
		}
		if !cr.s.json {
			fmt.Fprint(out, "\n\n")
			fmt.Fprintf(errw, "[turn %d: %d tokens in the state]\n", i+1, len(cr.sess.Tokens()))
			rep.print(errw)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stdinTurns reads the turns from standard input (c.App.Reader): an
// interactive conversation on a terminal, one turn per line otherwise.
func (cr *chatRun) stdinTurns(c *cli.Context) error {
	in := c.App.Reader
	if in == nil {
		in = os.Stdin
	}
	f, isFile := in.(*os.File)
	interactive := isFile && term.IsTerminal(int(f.Fd()))
	// The command handles interrupts itself here: main's context, which
	// the first Ctrl-C cancels, must not end the conversation.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	loop := &chatLoop{in: in, out: c.App.Writer, errw: c.App.ErrWriter, interactive: interactive, json: cr.s.json,
		sigs: sigs, base: context.WithoutCancel(c.Context), turn: cr.turn,
		reset: func() { cr.sess.Reset() }, stateTokens: func() int { return len(cr.sess.Tokens()) }}
	return loop.run()
}
