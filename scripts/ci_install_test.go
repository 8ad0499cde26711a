package scripts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The install step of .ci/run (ci-install.sh) runs here on a bare PATH
// holding only env, true and stubs: id and uname answer as the case says, sudo drops the
// environment as the real one does (so DEBIAN_FRONTEND must travel through
// env), and apt-get logs each call, refuses to run unless "root", can be
// told to fail, and "installs" a package by creating its command.

const stubPrelude = "#!%s\nset -u\n"

var stubs = map[string]string{
	"id": `[ "${1:-}" = -u ] || { echo "id stub: want -u" >&2; exit 2; }
echo "$STUB_UID"`,
	"uname": `[ "${1:-}" = -m ] || { echo "uname stub: want -m" >&2; exit 2; }
echo "$STUB_ARCH"`,
	// sudo -n: non-interactive; the real sudo resets the environment.
	"sudo": `echo "sudo $*" >>"$STUB_LOG"
[ "${1:-}" = -n ] || { echo "sudo stub: would prompt for a password" >&2; exit 1; }
[ "$STUB_SUDO_PASSWORD" = yes ] && { echo "sudo: a password is required" >&2; exit 1; }
shift
exec ` + "%ENV%" + ` -i PATH="$PATH" STUB_LOG="$STUB_LOG" STUB_BIN="$STUB_BIN" STUB_FAIL="$STUB_FAIL" STUB_INSTALL="$STUB_INSTALL" STUB_UID=0 "$@"`,
	"apt-get": `echo "apt-get[uid=$STUB_UID DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-}] $*" >>"$STUB_LOG"
[ "$STUB_UID" = 0 ] || { echo "E: Could not open lock file - open (13: Permission denied)" >&2; exit 100; }
sub=""
pkgs=()
skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case "$a" in
    -o) skip=1 ;;
    -*) ;;
    *) if [ -z "$sub" ]; then sub=$a; else pkgs+=("$a"); fi ;;
  esac
done
[ "$STUB_FAIL" = "$sub" ] && { echo "E: stub failure of $sub" >&2; exit 100; }
if [ "$sub" = install ] && [ "$STUB_INSTALL" = yes ]; then
  for p in "${pkgs[@]}"; do
    case "$p" in
      g++) c=g++ ;;
      clang) c=clang++ ;;
      qemu-user-static) c=qemu-aarch64-static ;;
      *) echo "E: Unable to locate package $p" >&2; exit 100 ;;
    esac
    printf '#!/bin/sh\nexit 0\n' >"$STUB_BIN/$c"
    ` + "%CHMOD%" + ` +x "$STUB_BIN/$c"
  done
fi
exit 0`,
}

type installCase struct {
	name       string
	uid        string
	arch       string
	present    []string // commands on PATH from the start
	noSudo     bool
	sudoPass   bool   // sudo wants a password
	fail       string // apt-get subcommand that fails
	noInstall  bool   // apt-get succeeds but installs nothing
	wantStatus int
	wantLog    []string
	wantErr    string   // substring of stderr
	wantCmds   []string // commands on PATH afterwards
}

const opt = "-o DPkg::Lock::Timeout=120"

var (
	rootUpdate  = "apt-get[uid=0 DEBIAN_FRONTEND=noninteractive] " + opt + " update -qq"
	rootInstall = "apt-get[uid=0 DEBIAN_FRONTEND=noninteractive] " + opt + " install -y -qq "
	sudoPrefix  = "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get " + opt + " "
	sudoProbe   = "sudo -n true"
)

var installCases = []installCase{
	{
		name: "root, both missing", uid: "0", arch: "x86_64",
		wantLog:  []string{rootUpdate, rootInstall + "g++ clang qemu-user-static"},
		wantCmds: []string{"g++", "clang++", "qemu-aarch64-static"},
	},
	{
		name: "root, no sudo on the machine", uid: "0", arch: "x86_64", noSudo: true,
		wantLog:  []string{rootUpdate, rootInstall + "g++ clang qemu-user-static"},
		wantCmds: []string{"g++", "clang++", "qemu-aarch64-static"},
	},
	{
		name: "user with sudo, both missing", uid: "1000", arch: "x86_64",
		wantLog: []string{
			sudoProbe, sudoPrefix + "update -qq", rootUpdate,
			sudoPrefix + "install -y -qq g++ clang qemu-user-static", rootInstall + "g++ clang qemu-user-static",
		},
		wantCmds: []string{"g++", "clang++", "qemu-aarch64-static"},
	},
	{
		name: "root, only qemu missing", uid: "0", arch: "x86_64", present: []string{"g++", "clang++"},
		wantLog:  []string{rootUpdate, rootInstall + "qemu-user-static"},
		wantCmds: []string{"g++", "clang++", "qemu-aarch64-static"},
	},
	{
		name: "arm64 needs no qemu", uid: "1000", arch: "aarch64",
		wantLog:  []string{sudoProbe, sudoPrefix + "update -qq", rootUpdate, sudoPrefix + "install -y -qq g++ clang", rootInstall + "g++ clang"},
		wantCmds: []string{"g++", "clang++"},
	},
	{
		name: "root, everything present", uid: "0", arch: "x86_64", present: []string{"g++", "clang++", "qemu-aarch64-static"},
		wantCmds: []string{"g++", "clang++", "qemu-aarch64-static"},
	},
	{
		name: "user, everything present, no sudo", uid: "1000", arch: "x86_64", noSudo: true,
		present: []string{"g++", "clang++", "qemu-aarch64-static"}, wantCmds: []string{"g++", "clang++", "qemu-aarch64-static"},
	},
	{
		name: "user without sudo", uid: "1000", arch: "x86_64", noSudo: true, wantStatus: 1,
		wantErr: "not running as root and no sudo: install g++ clang qemu-user-static",
	},
	{
		name: "user whose sudo wants a password", uid: "1000", arch: "x86_64", sudoPass: true, wantStatus: 1,
		wantLog: []string{sudoProbe}, wantErr: "sudo asks for a password here: run .ci/run as root",
	},
	{
		name: "apt-get update fails", uid: "0", arch: "x86_64", fail: "update", wantStatus: 1,
		wantLog: []string{rootUpdate}, wantErr: "apt-get update failed",
	},
	{
		name: "apt-get install fails under sudo", uid: "1000", arch: "x86_64", fail: "install", wantStatus: 1,
		wantLog: []string{sudoProbe, sudoPrefix + "update -qq", rootUpdate, sudoPrefix + "install -y -qq g++ clang qemu-user-static", rootInstall + "g++ clang qemu-user-static"},
		wantErr: "apt-get install g++ clang qemu-user-static failed",
	},
	{
		name: "apt-get succeeds but the command is still missing", uid: "0", arch: "x86_64", noInstall: true, wantStatus: 1,
		wantLog: []string{rootUpdate, rootInstall + "g++ clang qemu-user-static"},
		wantErr: "g++ is still not on PATH",
	},
}

func TestCIInstall(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("shell scripts")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	tool := map[string]string{}
	for _, name := range []string{"env", "chmod", "true"} {
		if tool[name], err = exec.LookPath(name); err != nil {
			t.Fatal(err)
		}
	}
	envPath := tool["env"]
	script, err := filepath.Abs("ci-install.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range installCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			logf := filepath.Join(dir, "calls.log")
			must(t, os.Mkdir(bin, 0o755))
			must(t, os.Symlink(envPath, filepath.Join(bin, "env")))
			must(t, os.Symlink(tool["true"], filepath.Join(bin, "true")))
			for name, body := range stubs {
				if name == "sudo" && c.noSudo {
					continue
				}
				body = strings.NewReplacer("%ENV%", envPath, "%CHMOD%", tool["chmod"]).Replace(body)
				must(t, os.WriteFile(filepath.Join(bin, name), []byte(fmt.Sprintf(stubPrelude, bash)+body+"\n"), 0o755))
			}
			for _, p := range c.present {
				must(t, os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\nexit 0\n"), 0o755))
			}
			install := "yes"
			if c.noInstall {
				install = "no"
			}
			cmd := exec.Command(bash, script)
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + bin, "STUB_LOG=" + logf, "STUB_BIN=" + bin, "STUB_UID=" + c.uid,
				"STUB_ARCH=" + c.arch, "STUB_FAIL=" + c.fail, "STUB_INSTALL=" + install, "STUB_SUDO_PASSWORD=" + map[bool]string{true: "yes"}[c.sudoPass]}
			var stderr bytes.Buffer
			cmd.Stdout = &stderr
			cmd.Stderr = &stderr
			cmd.WaitDelay = time.Second
			done := make(chan error, 1)
			must(t, cmd.Start())
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("ci-install.sh did not finish within 30 s:\n%s", stderr.String())
			}
			status := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != c.wantStatus {
				t.Errorf("exit status %d, want %d; output:\n%s", status, c.wantStatus, stderr.String())
			}
			if c.wantErr != "" && !strings.Contains(stderr.String(), c.wantErr) {
				t.Errorf("output does not say %q:\n%s", c.wantErr, stderr.String())
			}
			var got []string
			if data, err := os.ReadFile(logf); err == nil {
				got = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.wantLog) {
				t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.wantLog, "\n  "))
			}
			for _, name := range c.wantCmds {
				if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
					t.Errorf("%s is not on PATH afterwards", name)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCIRunUsesScripts keeps .ci/run on the tested scripts: its install step
// is ci-install.sh (not an inline apt-get), its temporary files live in the
// per-run directory, and it ends with the leftover-process check.
func TestCIRunUsesScripts(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	run := string(data)
	for _, want := range []string{"./scripts/ci-install.sh\n", `./scripts/ci-leftovers.sh "$ci_tmp"`, "mktemp -d", "trap cleanup EXIT",
		`export TMPDIR="$ci_tmp"`, `[ "$(tree_status)" != "$tree_before" ]`} {
		if !strings.Contains(run, want) {
			t.Errorf(".ci/run does not contain %q", want)
		}
	}
	for _, bad := range []string{"apt-get", "/tmp/", "$SUDO"} {
		if strings.Contains(run, bad) {
			t.Errorf(".ci/run contains %q (the install step and temp files belong in the tested scripts and the per-run dir)", bad)
		}
	}
}
