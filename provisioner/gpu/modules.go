package gpu

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/podvm-gpu/packer-plugin-podvm/cachedir"
	"github.com/podvm-gpu/packer-plugin-podvm/modcache"
	"github.com/podvm-gpu/packer-plugin-podvm/settings"
	"github.com/podvm-gpu/packer-plugin-podvm/shellquote"
)

// moduleCache is the build host's module cache where build_cache allows
// it for this target; nil for none.
func (e *executor) moduleCache() *modcache.Cache {
	if e.cacheRoot != "" && (e.plan.Cache.Mode == cachedir.ModeYes || e.chrootRoot != "") {
		return modcache.New(modcache.Dir(e.cacheRoot), e.plan.Cache.MaxSize)
	}
	if e.cacheRoot != "" {
		e.ui.Say("module cache: off, the image is not on this host (build_cache=auto); build_cache=yes copies builds over the communicator")
	}
	return nil
}

// commTarget is the image behind the communicator, as imagestep runs
// the plan's actions in it.
type commTarget struct{ e *executor }

func (t commTarget) Run(ctx context.Context, command string) error {
	_, err := t.e.r.run(ctx, command)
	return err
}

func (t commTarget) Output(ctx context.Context, command string) (string, error) {
	return t.e.r.query(ctx, command)
}

func (t commTarget) AptOutput(ctx context.Context, command string) (string, error) {
	return t.e.r.query(ctx, command)
}

func (t commTarget) RunInput(ctx context.Context, command string, stdin io.Reader) error {
	res, err := t.e.r.execInput(ctx, command, false, stdin)
	if err != nil {
		return err
	}
	return res.check(command)
}

func (t commTarget) Put(ctx context.Context, path string, content []byte, mode fs.FileMode, owner string) error {
	return t.e.writeFile(ctx, path, content, mode, owner)
}

func (t commTarget) Update(ctx context.Context) error {
	_, err := t.e.r.runApt(ctx, aptPrefix+" update")
	return err
}

// Install installs with the image's apt-get, through the build host's
// .deb cache where the image is the podvm-rootfs chroot. The plan's
// packages are what the image must hold, a held older version on a rerun
// included.
func (t commTarget) Install(ctx context.Context, pkgs []string, noRecommends bool) error {
	cmd := aptPrefix + " install --allow-change-held-packages"
	if t.e.dpkgUnsafe {
		cmd += " -o Dpkg::Options::=--force-unsafe-io"
	}
	if noRecommends {
		cmd += " --no-install-recommends"
	}
	cmd += " " + shellquote.JoinWords(pkgs...)
	return t.e.withDebs(ctx, cmd, "/var/cache/apt/archives", func() error {
		_, err := t.e.r.runApt(ctx, cmd)
		return err
	})
}

// Upload stages the file as the communicator's user, then moves it into
// place, as writeFile does.
func (t commTarget) Upload(ctx context.Context, path string, f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	staged := t.e.r.stagePath(baseName(path))
	err = t.e.r.retry(ctx, "uploading "+staged, func() error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		info := os.FileInfo(stagedInfo{name: baseName(staged), size: fi.Size()})
		return transfer(ctx, func() error { return t.e.r.comm.Upload(staged, f, &info) })
	})
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		_, err = t.e.r.run(ctx, "mv -f "+shellquote.Word(staged)+" "+shellquote.Word(path))
	}
	if err != nil {
		t.e.r.removeStaged(staged)
	}
	return err
}

func (t commTarget) Download(ctx context.Context, path string, open func() (io.WriteCloser, error)) error {
	return t.e.r.download(ctx, path, open)
}

// checkKeyModeExecuteCommand refuses, with nvidia_module_signing=key, an
// execute_command that feeds the command's input from somewhere else: the
// module signing key reaches the signing script on that input only (never
// a file of the image). sudo -S reads its password from it, a pipe or an
// input redirection replaces it; with `echo 'pw' | sudo -S sh -c ...` not
// one byte of the key arrived. The signing script checks the length of
// what it gets too, which catches the forms this cannot see.
func checkKeyModeExecuteCommand(tmpl string, o settings.Options) error {
	if !o.EnableGPU || o.ModuleSigning != settings.SigningKey {
		return nil
	}
	reason := stdinTaker(tmpl)
	if reason == "" {
		return nil
	}
	return fmt.Errorf("execute_command: %q: %s, and nvidia_module_signing=key sends the module signing key on the command's input, so the key would not reach the signing script; use a form that passes the input through, such as %q with passwordless sudo or %q as root (see docs/provisioners/gpu.mdx)",
		tmpl, reason, "sudo -n sh -c {{.Command}}", DefaultExecuteCommand)
}

// commandMark stands for {{.Command}} while stdinTaker reads a template.
const commandMark = "\x00command\x00"

var commandRe = regexp.MustCompile(`\{\{-?\s*\.Command\s*-?\}\}`)

// stdinTaker reads an execute_command template as the shell will and says
// how it takes the input of {{.Command}}: "" when it does not.
func stdinTaker(tmpl string) string {
	s := commandRe.ReplaceAllString(tmpl, commandMark)
	toks := shellTokens(s)
	for i, tk := range toks {
		if tk.op == "" && path.Base(tk.word) == "sudo" && sudoReadsStdin(toks[i+1:]) {
			return "sudo -S reads its password from the command's input"
		}
	}
	// The simple command that holds {{.Command}}: its list element, then
	// its pipeline element.
	start, end := 0, len(toks)
	at := -1
	for i, tk := range toks {
		switch tk.op {
		case ";", "&&", "||", "&", "\n":
			if at < 0 {
				start = i + 1
			} else if end == len(toks) {
				end = i
			}
		case "|", "|&":
			if at < 0 {
				return "a pipe feeds the command's input"
			}
		}
		if tk.op == "" && strings.Contains(tk.word, commandMark) && at < 0 && i >= start {
			at = i
		}
	}
	if at < 0 {
		return ""
	}
	for _, tk := range toks[start:end] {
		if tk.op == "|" || tk.op == "|&" {
			break
		}
		if strings.HasPrefix(tk.op, "<") && tk.op != "<(" {
			return "an input redirection (" + tk.op + ") replaces the command's input"
		}
	}
	return ""
}

// sudoReadsStdin reports whether sudo's options, the words that follow
// it, include -S (--stdin).
func sudoReadsStdin(args []shellToken) bool {
	// The options of sudo that take an argument.
	const withArg = "CDghpRrTtUu"
	longWithArg := []string{"--close-from", "--chdir", "--group", "--host", "--prompt", "--chroot", "--role", "--type", "--command-timeout", "--other-user", "--user"}
	for i := 0; i < len(args); i++ {
		w := args[i].word
		if args[i].op != "" || w == "--" || !strings.HasPrefix(w, "-") || w == "-" {
			return false
		}
		if strings.HasPrefix(w, "--") {
			if w == "--stdin" {
				return true
			}
			if slices.Contains(longWithArg, w) {
				i++
			}
			continue
		}
		for j, c := range w[1:] {
			if c == 'S' {
				return true
			}
			if strings.ContainsRune(withArg, c) {
				if j == len(w)-2 {
					i++ // the argument is the next word
				}
				break
			}
		}
	}
	return false
}

// shellToken is a word, unquoted, or an operator of the shell.
type shellToken struct{ word, op string }

// shellTokens splits s into words and operators as a POSIX shell does,
// quotes and backslashes removed. It is no parser: it is enough to find
// pipes, redirections and list separators outside quotes.
func shellTokens(s string) []shellToken {
	var toks []shellToken
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			toks = append(toks, shellToken{word: w.String()})
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case c == '"':
			inWord = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				w.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				w.WriteByte(s[i])
				inWord = true
			}
		case c == ' ' || c == '\t':
			flush()
		case strings.IndexByte(";&|<>\n", c) >= 0:
			flush()
			op := string(c)
			for _, two := range []string{"&&", "||", "|&", ";;", "<<<", "<<-", "<<", "<&", "<>", "<(", ">>", ">&", ">|"} {
				if strings.HasPrefix(s[i:], two) {
					op = two
					break
				}
			}
			toks = append(toks, shellToken{op: op})
			i += len(op) - 1
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return toks
}
