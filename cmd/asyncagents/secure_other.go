//go:build !unix

package main

// checkSecretFile checks nothing: Windows guards files with ACLs, which this command does
// not read; the state folder under the user's profile is private by default.
func checkSecretFile(what, path string, uid int) error { return nil }

// checkPrivateDir checks nothing, as checkSecretFile.
func checkPrivateDir(dir string, uid int) error { return nil }
