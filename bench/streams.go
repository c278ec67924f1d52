package main

// streamSuite is filled in below.
func streamSuite(env benchEnv) error { return nil }
