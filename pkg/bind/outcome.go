package bind

// Outcome is the result of binding (or previewing the binding of) a namespace.
type Outcome struct {
	Namespace  string
	Project    string // Run:ai project name (the queue)
	ProjectID  string
	Department string // Run:ai department name
	// Adopted is true when the project already existed, bound to the
	// namespace by someone else; we then never delete or move it.
	Adopted bool
	// AlreadyBound is true when the namespace carried the labels already.
	AlreadyBound bool
	// Ready is false when the project was still being set up by Run:ai when
	// the bind's deadline came; pods wait in its queue until it is Ready.
	Ready bool
}

// Verb says in words what binding did or would do.
func (o Outcome) Verb() string {
	switch {
	case o.AlreadyBound:
		return "is bound to"
	case o.Adopted:
		return "adopted"
	default:
		return "created"
	}
}

// Refusal is a bind that cannot succeed by retrying: the namespace's
// department label breaks the naming rule, the default department is
// missing in Run:ai, or a Run:ai project with the namespace's name is bound
// to another namespace. Admission shows Message as is.
type Refusal struct{ Message string }

func (r *Refusal) Error() string { return r.Message }
