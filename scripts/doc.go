// Package scripts holds the project's shell scripts (the test command, the
// CI steps) and, in its tests, checks of their logic run against stub
// commands on a bare PATH.
package scripts
