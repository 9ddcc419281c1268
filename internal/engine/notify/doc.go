// Package notify tells an operator a keeper's news: it runs the command of
// the config's [keep] notify on the control host with the notice in its
// environment, or POSTs the notice as JSON to a webhook URL. A notice
// holds names and a reason, never a secret; the command gets no more of
// the control service's environment than PATH and HOME.
//
// An engine: it must not import Temporal, activities, workflows, the CLI or
// the workers (activities.KeeperNotify wraps it).
package notify
