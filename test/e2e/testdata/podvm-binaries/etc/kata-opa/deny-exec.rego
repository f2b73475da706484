# Stand-in agent policy for this project's tests: allows every request but
# running a process in a container.
package agent_policy

default AllowRequestsFailingPolicy := true
default ExecProcessRequest := false
