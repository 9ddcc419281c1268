package logging

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// Output modes accepted by New. Console is for `worker dev` at a terminal;
// JSON is for workers run under a supervisor that ships logs elsewhere.
const (
	ModeConsole = "console"
	ModeJSON    = "json"
)

// New returns a zap logger writing to stderr in mode ("console" or "json")
// at level ("debug", "info", "warn", "error"; empty means "info"). The error
// names the bad value and the accepted ones, so a typo in a flag or config
// key is fixed in one go.
func New(mode, level string) (*zap.Logger, error) {
	return newLogger(mode, level, os.Stderr)
}

// newLogger is New with the destination as a parameter, for tests.
func newLogger(mode, level string, w *os.File) (*zap.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var enc zapcore.Encoder
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case ModeConsole, "":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		if isTerminal(w) {
			cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(cfg)
	case ModeJSON:
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	default:
		return nil, fmt.Errorf("logging: unknown log mode %q: use %q or %q", mode, ModeConsole, ModeJSON)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(w), lvl)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel)), nil
}

// NewFile returns a console-format logger appending to path (created 0600,
// with its directory), and also writing to each of echo (a terminal with
// --verbose). The starter uses it so the SDK client's and its own log
// lines land in a file under state_dir instead of between its one-line
// results; close flushes and closes the file.
func NewFile(path, level string, echo ...io.Writer) (l *zap.Logger, closeFn func() error, err error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("logging: log directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("logging: open log file %s: %w", path, err)
	}
	cfg := zap.NewDevelopmentEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.EncodeLevel = zapcore.CapitalLevelEncoder
	enc := zapcore.NewConsoleEncoder(cfg)
	cores := []zapcore.Core{zapcore.NewCore(enc, zapcore.Lock(f), lvl)}
	for _, w := range echo {
		cores = append(cores, zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl))
	}
	l = zap.New(zapcore.NewTee(cores...), zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel))
	return l, func() error { _ = l.Sync(); return f.Close() }, nil
}

// ParseLevel turns a config string into a zap level; empty means info. It is
// exported so callers can validate a `log_level` key before building loggers.
func ParseLevel(level string) (zapcore.Level, error) {
	s := strings.ToLower(strings.TrimSpace(level))
	if s == "" {
		return zapcore.InfoLevel, nil
	}
	if s == "warning" {
		s = "warn"
	}
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(s)); err != nil || lvl > zapcore.ErrorLevel {
		return 0, fmt.Errorf("logging: unknown log level %q: use debug, info, warn or error", level)
	}
	return lvl, nil
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// SDK adapts a zap logger to the Temporal SDK's logger interface, so
// client.Options.Logger, workflow.GetLogger and activity.GetLogger all write
// through zap. A nil logger yields a no-op logger.
func SDK(l *zap.Logger) log.Logger {
	if l == nil {
		l = zap.NewNop()
	}
	// One frame for the adapter method itself.
	return &sdkLogger{z: l.WithOptions(zap.AddCallerSkip(1)).Sugar()}
}

// sdkLogger implements log.Logger, log.WithLogger and log.WithSkipCallers.
type sdkLogger struct {
	z *zap.SugaredLogger
}

var (
	_ log.Logger          = (*sdkLogger)(nil)
	_ log.WithLogger      = (*sdkLogger)(nil)
	_ log.WithSkipCallers = (*sdkLogger)(nil)
)

func (s *sdkLogger) Debug(msg string, keyvals ...any) { s.z.Debugw(msg, pairs(keyvals)...) }
func (s *sdkLogger) Info(msg string, keyvals ...any)  { s.z.Infow(msg, pairs(keyvals)...) }
func (s *sdkLogger) Warn(msg string, keyvals ...any)  { s.z.Warnw(msg, pairs(keyvals)...) }
func (s *sdkLogger) Error(msg string, keyvals ...any) { s.z.Errorw(msg, pairs(keyvals)...) }

// With returns a child logger that prepends keyvals to every entry; the SDK
// uses it to tag workflow and activity logs with their IDs.
func (s *sdkLogger) With(keyvals ...any) log.Logger {
	return &sdkLogger{z: s.z.With(pairs(keyvals)...)}
}

// WithCallerSkip lets the SDK's own wrappers report the caller's line.
func (s *sdkLogger) WithCallerSkip(depth int) log.Logger {
	return &sdkLogger{z: s.z.WithOptions(zap.AddCallerSkip(depth))}
}

// pairs makes SDK keyvals safe for zap's sugared logger: a non-string key
// or a dangling key would otherwise make zap log a DPanic "ignored key"
// error; here it is kept under a synthetic key instead.
func pairs(keyvals []any) []any {
	out := make([]any, 0, len(keyvals))
	for i := 0; i < len(keyvals); i += 2 {
		key, ok := keyvals[i].(string)
		if !ok {
			key = fmt.Sprint(keyvals[i])
		}
		if i+1 >= len(keyvals) {
			out = append(out, zap.Any("_extra", keyvals[i]))
			break
		}
		out = append(out, zap.Any(key, keyvals[i+1]))
	}
	return out
}
