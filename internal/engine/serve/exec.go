package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sparklane/sparklane/internal/engine/secretenv"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/ranklogs"
)

// ExecDocker is what ExecHooks needs of a Docker client (docker exec, and
// inspect for the container's own secret names).
type ExecDocker interface {
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerExecCreate(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
}

// ExecInput is a lane's post_exec: commands run in one container.
type ExecInput struct {
	// Node and Container name where they run (for errors).
	Node, Container string
	// Commands run one after another as /bin/sh -c COMMAND (sparkrun runs
	// them with bash -c; /bin/sh is what every image has); the first
	// failure stops.
	Commands []string
	// Timeout bounds each command (default 2m).
	Timeout time.Duration
	// Secrets are masked in every output (the lane's env_from values, as
	// this worker resolved them); the values of the variables the
	// container's LabelSecretEnv names are masked too, so a worker that
	// restarted since the container started still masks them.
	Secrets []string
}

// ExecHooks runs in.Commands in the container, in order, each bounded by
// in.Timeout. A command that exits non-zero (or runs over) is a permanent
// HookFailed error naming the command, the container and node, its exit
// code and the tail of its output; the result holds every command that
// ran, the failing one last.
func ExecHooks(ctx context.Context, d ExecDocker, in ExecInput) ([]HookOutput, error) {
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ins, err := d.ContainerInspect(ctx, in.Container)
	if err != nil {
		return nil, fmt.Errorf("post_exec in container %s on node %s: %w", in.Container, in.Node, err)
	}
	secrets := append(ranklogs.SecretValues(ins.Config), in.Secrets...)
	var outs []HookOutput
	for i, command := range in.Commands {
		out, err := execOne(ctx, d, in.Container, command, timeout)
		out.Output = secretenv.Mask(out.Output, secrets)
		outs = append(outs, out)
		if err != nil {
			err = fmt.Errorf("post_exec %d (%q) in container %s on node %s: %w; output tail:\n%s", i+1, command, in.Container, in.Node, err, out.Output)
			if out.Exit != -1 {
				err = fault.Permanent(fault.HookFailed, err)
			}
			return outs, err
		}
	}
	return outs, nil
}

func execOne(ctx context.Context, d ExecDocker, ctr, command string, timeout time.Duration) (HookOutput, error) {
	out := HookOutput{Command: command, Exit: -1}
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	created, err := d.ContainerExecCreate(ectx, ctr, container.ExecOptions{
		Cmd: []string{"/bin/sh", "-c", command}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return out, fmt.Errorf("docker exec: %w", err)
	}
	att, err := d.ContainerExecAttach(ectx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return out, fmt.Errorf("docker exec attach: %w", err)
	}
	defer att.Close()
	tail := &tailBuffer{max: HookOutputLimit}
	done := make(chan error, 1)
	go func() { _, err := stdcopy.StdCopy(tail, tail, att.Reader); done <- err }()
	select {
	case err = <-done:
	case <-ectx.Done():
		att.Close()
		<-done
		out.Output = tail.String()
		return out, fmt.Errorf("timed out after %s", timeout)
	}
	out.Output = tail.String()
	if err != nil {
		return out, fmt.Errorf("read its output: %w", err)
	}
	ins, err := d.ContainerExecInspect(ectx, created.ID)
	if err != nil {
		return out, fmt.Errorf("docker exec inspect: %w", err)
	}
	out.Exit = ins.ExitCode
	if ins.ExitCode != 0 {
		return out, fmt.Errorf("exited %d", ins.ExitCode)
	}
	return out, nil
}
