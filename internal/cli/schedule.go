package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
)

// NightlyVerifyID is the schedule created by `starter schedule nightly-verify`.
const NightlyVerifyID = "nightly-verify"

func (a *App) scheduleCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Temporal Schedules: nightly re-verification of staged data"}
	var cron string
	var lanes []string
	var repair bool
	nightly := &cobra.Command{
		Use:   "nightly-verify [--cron \"0 3 * * *\"] [--lanes a,b] [--repair]",
		Short: "create (or update in place) a Schedule that verifies the staged blocks of lanes on every node",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			_, rs, err := a.recipes()
			if err != nil {
				return err
			}
			var names []string
			if len(lanes) == 0 {
				for _, r := range rs {
					if len(r.Staging) > 0 {
						names = append(names, r.Name)
					}
				}
			}
			for _, l := range lanes {
				r, err := resolveName(rs, l)
				if err != nil {
					return err
				}
				names = append(names, r)
			}
			if len(names) == 0 {
				return fmt.Errorf("no lane has [[staging]] blocks: nothing to verify")
			}
			env, err := a.connect(ctx)
			if err != nil {
				return err
			}
			id, err := upsertNightlyVerify(ctx, env.Client.ScheduleClient(), cron, names, repair)
			if err != nil {
				return err
			}
			return a.output(map[string]any{"schedule_id": id, "cron": cron, "lanes": names, "repair": repair}, func() {
				fmt.Fprintf(a.Out, "schedule %s: %q verifies %s (repair: %v)\n", id, cron, strings.Join(names, ", "), repair)
			})
		},
	}
	nightly.Flags().StringVar(&cron, "cron", "0 3 * * *", "cron expression (UTC)")
	nightly.Flags().StringSliceVar(&lanes, "lanes", nil, "lanes to verify (default: every lane with staging)")
	nightly.Flags().BoolVar(&repair, "repair", false, "re-stage only what drifted")
	list := &cobra.Command{
		Use:   "list",
		Short: "list schedules",
		RunE: a.withClient(func(ctx context.Context, req *request) error {
			it, err := req.env.Client.ScheduleClient().List(ctx, client.ScheduleListOptions{})
			if err != nil {
				return err
			}
			type row struct {
				ID   string   `json:"id"`
				Cron []string `json:"cron"`
				Next string   `json:"next,omitempty"`
			}
			var rows []row
			for it.HasNext() {
				e, err := it.Next()
				if err != nil {
					return err
				}
				r := row{ID: e.ID}
				if e.Spec != nil {
					for _, c := range e.Spec.Calendars {
						r.Cron = append(r.Cron, fmt.Sprintf("%v", c))
					}
					r.Cron = append(r.Cron, e.Spec.CronExpressions...)
				}
				if len(e.NextActionTimes) > 0 {
					r.Next = e.NextActionTimes[0].UTC().Format("2006-01-02 15:04 MST")
				}
				rows = append(rows, r)
			}
			return a.output(rows, func() {
				var t [][]string
				for _, r := range rows {
					t = append(t, []string{r.ID, dash(r.Next)})
				}
				table(a.Out, []string{"SCHEDULE", "NEXT RUN"}, t)
			})
		}),
	}
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "delete a schedule",
		Args:  cobra.ExactArgs(1),
		RunE: a.withClient(func(ctx context.Context, req *request) error {
			id := req.args[0]
			if err := req.env.Client.ScheduleClient().GetHandle(ctx, id).Delete(ctx); err != nil {
				return fmt.Errorf("delete schedule %s: %w", id, err)
			}
			fmt.Fprintf(a.Out, "deleted schedule %s\n", id)
			return nil
		}),
	}
	cmd.AddCommand(nightly, list, del)
	return cmd
}

// upsertNightlyVerify updates the nightly-verify schedule in place (its
// history of runs, its creation time and a pause stay) or creates it when
// there is none: delete-then-create lost them, and a failure between the two
// left no schedule at all. Schedule and scheduled runs carry the search
// attributes (the lane when there is one; verify runs across lanes are
// found by workflow ID), from searchattr.For like every other run.
func upsertNightlyVerify(ctx context.Context, sc client.ScheduleClient, cron string, names []string, repair bool) (string, error) {
	lane := ""
	if len(names) == 1 {
		lane = names[0]
	}
	sa := searchattr.For(lane, "")
	spec := client.ScheduleSpec{CronExpressions: []string{cron}}
	action := &client.ScheduleWorkflowAction{
		ID:                    contract.VerifyID("nightly"),
		Workflow:              contract.WorkflowVerify,
		TaskQueue:             contract.ControlQueue,
		Args:                  []any{contract.VerifyInput{LaneNames: names, Repair: repair, Report: true}},
		TypedSearchAttributes: sa,
	}
	err := sc.GetHandle(ctx, NightlyVerifyID).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec, s.Action = &spec, action
			return &client.ScheduleUpdate{Schedule: &s, TypedSearchAttributes: &sa}, nil
		},
	})
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		return NightlyVerifyID, nil
	case !errors.As(err, &notFound):
		return "", fmt.Errorf("update schedule %s: %w", NightlyVerifyID, err)
	}
	h, err := sc.Create(ctx, client.ScheduleOptions{
		ID:                    NightlyVerifyID,
		Spec:                  spec,
		Action:                action,
		Memo:                  map[string]any{"lanes": strings.Join(names, ",")},
		TypedSearchAttributes: sa,
	})
	if err != nil {
		return "", fmt.Errorf("create schedule %s: %w", NightlyVerifyID, err)
	}
	return h.GetID(), nil
}
