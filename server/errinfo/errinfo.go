package errinfo

// Domain is the google.rpc.ErrorInfo domain of the service's errors: the
// proto package of the API.
const Domain = "coordinator.v1"
