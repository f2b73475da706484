# Stand-in agent policy for this project's tests: allows every request.
package agent_policy

default AllowRequestsFailingPolicy := true
