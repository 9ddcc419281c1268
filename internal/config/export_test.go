package config

import "github.com/sparklane/sparklane/internal/testkit/conftest"

// Seeds the fuzz targets (fuzz_test.go, package config_test: they render
// through internal/lane, which imports config) share with this package's
// tests.
const (
	GoodConfig   = conftest.GoodConfig
	HostileFleet = conftest.HostileFleet
)
