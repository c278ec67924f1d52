// Package servertest makes the Coordinator API calls that most tests of the
// service make, over any coordinatorv1.CoordinatorClient: the service's own
// tests (package server, a bare Service) and the process's (package
// coordinatord, a whole coordinator) share it, as the stores' tests share
// server/store/storetest.
//
// It is a test kit: only tests import it. It imports the generated API
// alone, never the service or the process, so that the service's tests may
// use it.
package servertest
