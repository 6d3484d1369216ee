package engine

// ResolveKafkaConfig is KafkaConfig's check and defaults, for the tests of
// the one place that does both.
func ResolveKafkaConfig(cfg KafkaConfig) (KafkaConfig, error) { return cfg.resolve() }
