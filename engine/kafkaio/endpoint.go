package kafkaio

import "strings"

// endpointClientIDPrefix marks a client.id that carries an endpoint.
const endpointClientIDPrefix = "snapfence@"

// maxEndpointLen bounds Config.Endpoint: a client.id is a string of at
// most 32767 bytes on the wire, and a URL needs far fewer.
const maxEndpointLen = 1024

// EndpointClientID is the client.id a group member with Config.Endpoint
// joins with: "snapfence@" and the endpoint. Every group protocol
// describes a member's client.id (DescribeGroups, ConsumerGroupDescribe),
// so any instance of the group reads the endpoint of each partition's
// owner there, with no topic or request of snapfence's own.
func EndpointClientID(endpoint string) string { return endpointClientIDPrefix + endpoint }

// ClientIDEndpoint is the endpoint a client.id carries (EndpointClientID),
// or "" for one that carries none.
func ClientIDEndpoint(clientID string) string {
	endpoint, ok := strings.CutPrefix(clientID, endpointClientIDPrefix)
	if !ok {
		return ""
	}
	return endpoint
}
