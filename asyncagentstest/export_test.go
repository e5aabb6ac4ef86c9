package asyncagentstest

// The waits with a shorter time than AwaitTimeout, for the tests of what does not come.
var (
	AwaitTaskWithin          = awaitTask
	AwaitBusyWithin          = awaitBusy
	AwaitNotificationsWithin = awaitNotifications
)
