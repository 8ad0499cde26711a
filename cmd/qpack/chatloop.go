package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/qpack-go/qpack/runtime/runner"
)

// maxTurnLine bounds one line of chat input.
const maxTurnLine = 1 << 20

// chatLoop reads chat turns line by line and runs them. Interactive (a
// terminal): it prompts, an interrupt stops the reply and returns to the
// prompt, two interrupts in a row at the prompt exit 130. Otherwise each
// line is a turn, echoed as "> line", and an interrupt stops the reply and
// the conversation (exit 130). SIGTERM ends it in both modes. The line
// "/reset" starts a new conversation, "/exit" (or "/quit", or the end of
// the input) ends it; empty lines are skipped.
type chatLoop struct {
	in          io.Reader
	out, errw   io.Writer
	interactive bool
	json        bool
	sigs        <-chan os.Signal // interrupts (nil: none)
	base        context.Context  // the replies' parent context
	turn        func(ctx context.Context, user string) (*runReport, error)
	reset       func()
	stateTokens func() int
}

type inputLine struct {
	text string
	err  error
}

// readLines sends each line of r (without its end of line) and then, at
// the end of the input or on an error, closes the channel after sending
// the error (io.EOF is not sent).
func readLines(r io.Reader) <-chan inputLine {
	ch := make(chan inputLine)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), maxTurnLine)
		for sc.Scan() {
			ch <- inputLine{text: strings.TrimSuffix(sc.Text(), "\r")}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				err = fmt.Errorf("chat: a line of standard input is longer than %d bytes", maxTurnLine)
			}
			ch <- inputLine{err: err}
		}
	}()
	return ch
}

func (cl *chatLoop) prompt() {
	if cl.interactive {
		fmt.Fprint(cl.out, ">> ")
	}
}

func (cl *chatLoop) run() error {
	lines := readLines(cl.in)
	if cl.interactive {
		fmt.Fprintln(cl.errw, "[chat: a line per turn; /reset starts over, /exit or Ctrl-D ends; Ctrl-C stops a reply]")
	}
	atPrompt := 0 // interrupts in a row at the prompt
	turn := 0
	cl.prompt()
	for {
		var ln inputLine
		var ok bool
		select {
		case ln, ok = <-lines:
		case sig := <-cl.sigs:
			if !cl.interactive || sig == syscall.SIGTERM {
				return context.Canceled
			}
			if atPrompt++; atPrompt >= 2 {
				fmt.Fprintln(cl.out)
				return context.Canceled
			}
			fmt.Fprintln(cl.out, "\n[Ctrl-C again, /exit or Ctrl-D to quit]")
			cl.prompt()
			continue
		}
		if !ok {
			if cl.interactive {
				fmt.Fprintln(cl.out)
			}
			return nil
		}
		if ln.err != nil {
			return withCode(2, ln.err)
		}
		atPrompt = 0
		text := strings.TrimSpace(ln.text)
		switch text {
		case "":
			cl.prompt()
			continue
		case "/exit", "/quit":
			return nil
		case "/reset":
			cl.reset()
			fmt.Fprintln(cl.errw, "[new conversation]")
			cl.prompt()
			continue
		}
		turn++
		if !cl.interactive && !cl.json {
			fmt.Fprintf(cl.out, "> %s\n", ln.text)
		}
		rep, sig, err := cl.reply(ln.text)
		if rep == nil {
			if cl.interactive && !errors.Is(err, context.Canceled) {
				// A turn refused (too long for the context): say so and
				// go on with the conversation as it was.
				fmt.Fprintln(cl.errw, "qpack:", err)
				cl.prompt()
				continue
			}
			return err
		}
		if !cl.json {
			fmt.Fprint(cl.out, "\n\n")
			if cl.interactive {
				fmt.Fprintf(cl.errw, "[%d tokens, %.1f tok/s, stopped by %s; %d tokens in the conversation]\n",
					rep.GeneratedTokens, rep.DecodeTokPerSec, stopText(rep.StopReason), cl.stateTokens())
			} else {
				fmt.Fprintf(cl.errw, "[turn %d: %d tokens in the state]\n", turn, cl.stateTokens())
				rep.print(cl.errw)
			}
		}
		if sig != nil && (!cl.interactive || sig == syscall.SIGTERM) {
			return context.Canceled
		}
		if err != nil && !cl.interactive {
			return err
		}
		cl.prompt()
	}
}

// reply runs one turn under a context that an interrupt cancels; it
// returns the signal that stopped it, if one came.
func (cl *chatLoop) reply(user string) (*runReport, os.Signal, error) {
	ctx, cancel := context.WithCancel(cl.base)
	defer cancel()
	done, exited := make(chan struct{}), make(chan struct{})
	var sig os.Signal
	go func() {
		defer close(exited)
		select {
		case sig = <-cl.sigs:
			cancel()
		case <-done:
		}
	}()
	rep, err := cl.turn(ctx, user)
	close(done)
	<-exited
	return rep, sig, err
}

// stopText is how a summary names a stop reason.
func stopText(reason string) string {
	if reason == runner.StopInterrupted {
		return "an interrupt"
	}
	return reason
}
