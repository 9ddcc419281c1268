package serve

// SetRemoveFault makes every removal as the worker user ask f first (f's
// error stands for the kernel's); the returned func restores the default.
// Root ignores permissions, so this is how tests reach the helper path.
func SetRemoveFault(f func(path string) error) (restore func()) {
	old := removeFault
	removeFault = f
	return func() { removeFault = old }
}
