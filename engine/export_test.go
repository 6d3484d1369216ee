package engine

// OpenPebble opens the engine's cache for BenchmarkEngineMemory, which is
// an external test (it drives the core directly) and cannot reach
// openPebble; the cache is not part of the API.
var OpenPebble = openPebble
