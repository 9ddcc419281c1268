package cli

import "github.com/sparklane/sparklane/internal/config"

func resolveName(rs []*config.Recipe, lane string) (string, error) {
	r, err := config.Resolve(rs, lane)
	if err != nil {
		return "", err
	}
	return r.Name, nil
}
