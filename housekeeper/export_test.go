package housekeeper

// OwnerOf is View.Owner for a task named as the metrics name it.
func OwnerOf(v View, t string, queue string) string { return v.Owner(task(t), queue) }
