// Package steps turns a step (agent, built-in or command) into a process
// spec: argv, working directory and environment.
package steps
