"""Plans with their quotas and prices; usage records and invoices come with metering."""
