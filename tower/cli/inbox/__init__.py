"""`tower inbox`: the approvers' web app (issue 15). See docs/inbox.md."""
