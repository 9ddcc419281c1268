package lane

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// fill sets every field reachable from v to a non-zero value (one element
// in every slice and map), so a conversion that drops a field shows.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Uint8:
		v.SetUint(7)
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	}
}

// zeros lists the paths of the zero-valued fields reachable from v.
func zeros(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Struct:
		var out []string
		for i := 0; i < v.NumField(); i++ {
			out = append(out, zeros(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeros(v.Elem(), path)
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		return zeros(v.Index(0), path+"[0]")
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// Wire carries every field of the recipe file into the wire recipe, and
// the two types have the same fields (LoadWarnings aside, which reach the
// plan's warnings): a key added to one and not the other, or not
// converted, would be dropped from histories and the recipe hash.
func TestWireCarriesEveryField(t *testing.T) {
	var r config.Recipe
	fill(reflect.ValueOf(&r).Elem())
	w := Wire(&r)
	if z := zeros(reflect.ValueOf(w), "Recipe"); len(z) != 0 {
		t.Errorf("Wire drops %s", strings.Join(z, ", "))
	}
	var fileFields, wireFields []string
	for _, f := range reflect.VisibleFields(reflect.TypeOf(r)) {
		if f.Name != "LoadWarnings" {
			fileFields = append(fileFields, f.Name)
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(w)) {
		wireFields = append(wireFields, f.Name)
	}
	if fmt.Sprint(fileFields) != fmt.Sprint(wireFields) {
		t.Errorf("config.Recipe fields %v\ncontract.Recipe fields %v", fileFields, wireFields)
	}
}

// The shipped lanes' recipe hashes are what running lanes were started
// with: a change to the wire recipe's JSON (a field, a tag, the
// conversion) changes them, and every running lane would read as stale.
// Such a change is a versioned change; rewrite the golden with -update
// only then.
func TestShippedRecipeHashes(t *testing.T) {
	_, rs := exampleFleet(t)
	var b strings.Builder
	for _, r := range rs {
		w := Wire(r)
		h, err := RecipeHash(&w, nil)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s\n", r.Name, h)
	}
	checkGolden(t, "recipe-hashes.txt", b.String())
}
