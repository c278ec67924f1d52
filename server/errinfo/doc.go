// Package errinfo names the google.rpc.ErrorInfo domain of the coordinator's
// errors, so that the service and the middleware around it (the access
// checks) stamp their errors alike without one importing the other. The
// reasons themselves are the proto's ErrorReason enum.
//
// It is a leaf of the server layer: it imports nothing of this module.
package errinfo
