package kafkaio

// ResolveConfig is Config's check and defaults, for the tests of the one
// place that does both.
func ResolveConfig(cfg Config) (Config, error) { return cfg.resolve() }
