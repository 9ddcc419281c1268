package searchattr

import (
	"context"
	"errors"
	"fmt"
	"sort"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Names of the custom search attributes (both Keyword).
const (
	// Lane is the recipe name a run acts on (e.g. "demo-4x").
	Lane = "SparklaneLane"
	// Cluster is the cluster the lane runs on.
	Cluster = "SparklaneCluster"
)

// Typed keys for client.StartWorkflowOptions.TypedSearchAttributes and
// workflow.UpsertTypedSearchAttributes.
var (
	LaneKey    = temporal.NewSearchAttributeKeyKeyword(Lane)
	ClusterKey = temporal.NewSearchAttributeKeyKeyword(Cluster)
)

// For is the search attributes of a run acting on lane and cluster (either
// may be empty): the one place runs, child runs and scheduled runs get them
// from, so every run of a lane is found by the same query.
func For(lane, cluster string) temporal.SearchAttributes {
	var sa []temporal.SearchAttributeUpdate
	if lane != "" {
		sa = append(sa, LaneKey.ValueSet(lane))
	}
	if cluster != "" {
		sa = append(sa, ClusterKey.ValueSet(cluster))
	}
	return temporal.NewSearchAttributes(sa...)
}

// Definitions lists every custom search attribute with its type; an
// external cluster needs the same set registered (see Ensure).
func Definitions() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		Lane:    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		Cluster: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
}

// Ensure registers the missing search attributes in namespace. Attributes
// already present with the right type are left alone, so it is safe at
// every start; one registered under another type is an error naming it.
func Ensure(ctx context.Context, c client.Client, namespace string) error {
	op := c.OperatorService()
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %s: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	names := []string{}
	for name, typ := range Definitions() {
		got, ok := have.GetCustomAttributes()[name]
		if !ok {
			missing[name] = typ
			names = append(names, name)
			continue
		}
		if got != typ {
			return fmt.Errorf("search attribute %s in namespace %s has type %s, sparklane needs %s: remove it (temporal operator search-attribute remove --name %s) and restart",
				name, namespace, got, typ, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(names)
	_, err = op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("register search attributes %v in namespace %s: %w", names, namespace, err)
	}
	return nil
}
