package enginetest

// WithoutFence runs cfg's members on a Plain-mode backend, without the
// transactional fence: the negative controls of this package's tests.
func WithoutFence[S any](cfg Config[S]) Config[S] {
	cfg.plainStore = true
	return cfg
}
