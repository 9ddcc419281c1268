package contract

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kballard/go-shellquote"
	"mvdan.cc/sh/v3/syntax"
)

// This file is the one owner of sh words: how a recipe's command template
// is split into argv (SplitArgs), how an argument is quoted back into a
// command line (QuoteWord, JoinArgs) and how a placeholder's value is put
// into a command a shell will run (RenderShell: post_exec, post_commands,
// pre_exec, the bench harness). A value is data, never code: wherever it
// lands it is one literal word, or the render fails.

// Placeholder matches one {key} of a template; group 1 is the key.
var Placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// SplitArgs splits a command into words by sh's rules (go-shellquote):
// whitespace separates words, a backslash-newline continues the line,
// single quotes are literal, double quotes allow \" \\ \$ \` escapes, a bare
// backslash escapes the next character. No expansion of any kind is done.
// It is how a recipe's command template and a spec's Entrypoint are read
// into argv, by the loader, the renderer and the node worker alike.
func SplitArgs(s string) ([]string, error) {
	words, err := shellquote.Split(strings.ReplaceAll(s, "\r\n", "\n"))
	if err != nil {
		return nil, fmt.Errorf("%v: close the quote or drop the trailing backslash", strings.ToLower(err.Error()[:1])+err.Error()[1:])
	}
	return words, nil
}

// QuoteWord makes s one literal sh word: plain text stays bare, anything
// else is backslash-escaped or single-quoted (go-shellquote), and a leading
// '#' is escaped so the word never starts a comment. It is the only quoter
// of the project's shell text.
func QuoteWord(s string) string {
	q := shellquote.Join(s)
	if strings.HasPrefix(q, "#") {
		q = `\` + q
	}
	return q
}

// JoinArgs is the inverse of SplitArgs: one line, each argument quoted by
// QuoteWord only when it needs to be, so the printed command
// (NodePlan.Command) can be pasted into a shell and splits back into the
// same argv.
func JoinArgs(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = QuoteWord(a)
	}
	return strings.Join(words, " ")
}

// ShellPartError is RenderShell's error about one of its parts, so the
// caller can name the recipe key (post_commands[2]) it came from.
type ShellPartError struct {
	Part int
	Err  error
}

func (e *ShellPartError) Error() string { return e.Err.Error() }
func (e *ShellPartError) Unwrap() error { return e.Err }

// shellContext is where a placeholder lands in the shell text.
type shellContext int

const (
	ctxUnsure shellContext = iota // a place no quoting makes one literal word
	ctxBare                       // unquoted (at top level or in $(...))
	ctxSingle                     // '...'
	ctxDouble                     // "..."
)

// RenderShell fills the {key} placeholders of parts, shell commands read
// as one script (each part a line of it, as pre_exec's commands are run),
// so that every value is one literal word of the command wherever it
// lands. Unquoted it is quoted (QuoteWord); an empty value there is no
// word, as an unquoted empty variable in sh and an empty placeholder word
// of `command` ('{key}' keeps an empty word). Inside the author's '...' or
// "..." it is spliced as is when that is already literal there, else the
// quote is closed around QuoteWord's word and opened again, so '{v}' never
// comes out double-quoted wrongly. The shell text is parsed (mvdan.cc/sh,
// bash's grammar) to learn each placeholder's context; a value that is
// not plain (letters, digits, ._/:=@,+%-) landing where quoting cannot make
// it literal — inside ${...}, $((...)), `...`, a here-document, a comment
// or shell text that does not parse — is an error naming the placeholder.
//
// value gives a key's value: ok false leaves {key} as written (a shell's
// own braces); an error stops the render. {key} right after '$' or '\' is
// the shell's (${HOME}, \{) and never a placeholder.
func RenderShell(parts []string, value func(part int, key string) (val string, ok bool, err error)) ([]string, error) {
	prefix := sentinelPrefix(parts)
	marked := make([]string, len(parts))
	var vals, keys []string
	var partOf []int
	for i, s := range parts {
		var b strings.Builder
		last := 0
		for _, m := range Placeholder.FindAllStringSubmatchIndex(s, -1) {
			if m[0] > 0 && (s[m[0]-1] == '$' || s[m[0]-1] == '\\') {
				continue
			}
			key := s[m[2]:m[3]]
			v, ok, err := value(i, key)
			if err != nil {
				return nil, &ShellPartError{Part: i, Err: err}
			}
			if !ok {
				continue
			}
			b.WriteString(s[last:m[0]])
			b.WriteString(prefix + strconv.Itoa(len(vals)) + "x")
			last = m[1]
			vals, keys, partOf = append(vals, v), append(keys, key), append(partOf, i)
		}
		b.WriteString(s[last:])
		marked[i] = b.String()
	}
	if len(vals) == 0 {
		return append([]string(nil), parts...), nil
	}
	ctx, parseErr := shellContexts(strings.Join(marked, "\n"), prefix, len(vals))
	repl := make([]string, 0, 2*len(vals))
	for n, v := range vals {
		out, err := spliceValue(v, ctx[n])
		if err != nil {
			if parseErr != nil {
				err = fmt.Errorf("placeholder {%s}: its value %q has shell characters, and the command is not shell sparklane can read (%v), so it cannot be quoted as one word: fix the command", keys[n], v, parseErr)
			} else {
				err = fmt.Errorf("placeholder {%s}: its value %q has shell characters and %v, where quoting cannot make it one literal word: move {%s} out of it (e.g. V={%s} first, then \"$V\"), or give it a value of letters, digits and ._/:=@,+%%-", keys[n], v, err, keys[n], keys[n])
			}
			return nil, &ShellPartError{Part: partOf[n], Err: err}
		}
		repl = append(repl, prefix+strconv.Itoa(n)+"x", out)
	}
	r := strings.NewReplacer(repl...)
	for i := range marked {
		marked[i] = r.Replace(marked[i])
	}
	return marked, nil
}

// spliceValue is v as it is written into context c, or why it cannot be.
func spliceValue(v string, c shellContext) (string, error) {
	if plainWord(v) {
		return v, nil
	}
	switch c {
	case ctxBare:
		return QuoteWord(v), nil
	case ctxSingle:
		if !strings.Contains(v, "'") {
			return v, nil
		}
		return "'" + QuoteWord(v) + "'", nil
	case ctxDouble:
		if !strings.ContainsAny(v, "$`\"\\") {
			return v, nil
		}
		return `"` + QuoteWord(v) + `"`, nil
	}
	return "", errors.New("sits inside ${...}, $((...)), `...`, a here-document, a comment or a name")
}

// plainWord says whether v is literal in every shell context: no
// character any of them reads specially (the empty value included).
func plainWord(v string) bool {
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/:=@,+%-", r)) {
			return false
		}
	}
	return true
}

// sentinelPrefix is a word no part contains, to stand in for the
// placeholders while the shell text is parsed.
func sentinelPrefix(parts []string) string {
	prefix := "SpLkPh"
	for strings.Contains(strings.Join(parts, "\n"), prefix) {
		prefix += "Q"
	}
	return prefix
}

var sentinelRE = regexp.MustCompile(`^[0-9]+x`)

// shellContexts parses script and says, for each of the n sentinels
// (prefix + index + "x"), where it lands; one found nowhere it can tell
// (a comment, a name) is ctxUnsure, and so is every one when script does
// not parse (the error returned).
func shellContexts(script, prefix string, n int) ([]shellContext, error) {
	ctx := make([]shellContext, n)
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return ctx, err
	}
	var stack []syntax.Node
	mark := func(text string, c shellContext) {
		for rest := text; ; {
			i := strings.Index(rest, prefix)
			if i < 0 {
				return
			}
			rest = rest[i+len(prefix):]
			m := sentinelRE.FindString(rest)
			if idx, err := strconv.Atoi(strings.TrimSuffix(m, "x")); err == nil && idx < n {
				ctx[idx] = c
			}
		}
	}
	syntax.Walk(f, func(node syntax.Node) bool {
		if node == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		stack = append(stack, node)
		switch x := node.(type) {
		case *syntax.SglQuoted:
			c := ctxSingle
			if x.Dollar {
				c = ctxUnsure
			}
			mark(x.Value, enclosing(stack, c))
		case *syntax.Lit:
			c := ctxUnsure
			if len(stack) >= 2 {
				switch stack[len(stack)-2].(type) {
				case *syntax.Word, *syntax.DblQuoted:
					c = enclosing(stack, ctxBare)
				}
			}
			mark(x.Value, c)
		}
		return true
	})
	return ctx, nil
}

// enclosing is the context of a node whose ancestors are stack (the node
// itself last): own when nothing around it changes the quoting, else the
// nearest "..." or $(...), and ctxUnsure under any construct whose inside
// the quoting rules of a plain word do not cover.
func enclosing(stack []syntax.Node, own shellContext) shellContext {
	c, decided := own, own != ctxBare
	for i := len(stack) - 2; i >= 0; i-- {
		switch x := stack[i].(type) {
		case *syntax.ParamExp, *syntax.ArithmExp, *syntax.ArithmCmd, *syntax.LetClause, *syntax.ExtGlob, *syntax.CStyleLoop:
			return ctxUnsure
		case *syntax.Redirect:
			if stack[i+1] == syntax.Node(x.Hdoc) || x.Op == syntax.Hdoc || x.Op == syntax.DashHdoc {
				return ctxUnsure
			}
		case *syntax.CmdSubst:
			if x.Backquotes || x.TempFile || x.ReplyVar {
				return ctxUnsure
			}
			decided = true
		case *syntax.ProcSubst:
			decided = true
		case *syntax.DblQuoted:
			if !decided {
				c, decided = ctxDouble, true
			}
		}
	}
	return c
}
