package enroll

import "github.com/nats-io/jwt/v2"

// RevokeInbox is the inbox prefix of serve's system-account user on an
// existing NATS cluster (cluster.Revoker): the only subjects it may
// receive on.
const RevokeInbox = "_INBOX_KUSAW_REVOKE"

// RevokerPerms are the permissions of serve's system user for account:
// look up and update that account's JWT, receive the answers. kusaw
// cluster nats-config scopes the system account's signing key to them.
func RevokerPerms(account string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add("$SYS.REQ.ACCOUNT."+account+".CLAIMS.LOOKUP", "$SYS.REQ.ACCOUNT."+account+".CLAIMS.UPDATE")
	p.Sub.Allow.Add(RevokeInbox + ".>")
	return p
}
