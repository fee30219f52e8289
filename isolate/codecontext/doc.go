// Package codecontext runs code contexts: interpreters that keep their
// state between calls, as a notebook's kernel does, each a driver process
// (codedriver/) that a context starts through the starter it is given.
// A session gives it its Start (isolate.Session.NewCodeContext); this
// package knows no session, box or supervisor.
package codecontext
