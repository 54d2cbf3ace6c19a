"""Regenerate the sample `handbook` collection: `python data/generate_handbook.py`.

A fictional support and policy handbook for "Relay", a team messaging and help-desk product.
The output is deterministic (fixed seed) and committed, so the demo never depends on this
script; it exists so the corpus can be rebuilt or grown.
"""

import random
import textwrap
from pathlib import Path

OUT = Path(__file__).resolve().parent / "handbook"

# (folder, slug, title, subject, action, facts)
TOPICS = [
    (
        "account",
        "reset-password",
        "Resetting your password",
        "password",
        "reset your password",
        [
            "Reset links expire after 30 minutes.",
            "Use the Forgot password link on the sign-in page.",
            "Single sign-on users reset their password with their identity provider instead.",
        ],
    ),
    (
        "account",
        "username",
        "Choosing a username",
        "username",
        "change your username",
        [
            "Usernames are unique within a workspace.",
            "Mentions follow a renamed user automatically.",
        ],
    ),
    (
        "account",
        "change-email",
        "Changing your email address",
        "email address",
        "change the email address on your account",
        ["A confirmation link is sent to the new address.", "The old address is notified."],
    ),
    (
        "account",
        "two-factor-authentication",
        "Two-factor authentication",
        "two-factor authentication",
        "turn on two-factor authentication",
        [
            "Relay supports authenticator apps and hardware security keys.",
            "Recovery codes are shown once; store them safely.",
        ],
    ),
    (
        "account",
        "recovery-codes",
        "Using recovery codes",
        "recovery code",
        "sign in with a recovery code",
        ["Each recovery code works once.", "You can generate a new set at any time."],
    ),
    (
        "account",
        "delete-account",
        "Deleting your account",
        "account deletion",
        "delete your account",
        [
            "Deletion is final after a 14-day grace period.",
            "Workspace owners must transfer ownership first.",
        ],
    ),
    (
        "account",
        "profile-and-avatar",
        "Editing your profile and avatar",
        "profile",
        "edit your profile",
        [
            "Avatars may be PNG or JPEG up to 5 MB.",
            "Display names appear in every workspace you belong to.",
        ],
    ),
    (
        "account",
        "notification-preferences",
        "Notification preferences",
        "notifications",
        "choose which notifications you receive",
        [
            "Do-not-disturb hours apply to mobile and desktop.",
            "Mentions always notify unless you mute the channel.",
        ],
    ),
    (
        "account",
        "sign-in-problems",
        "Trouble signing in",
        "sign-in",
        "fix sign-in problems",
        [
            "Clear cookies if you are stuck in a redirect loop.",
            "Accounts lock for 15 minutes after 10 failed attempts.",
        ],
    ),
    (
        "account",
        "sessions-and-devices",
        "Managing sessions and devices",
        "session",
        "sign out of other devices",
        ["Sessions expire after 30 days of inactivity.", "Admins can force sign-out for everyone."],
    ),
    (
        "account",
        "language-and-time-zone",
        "Language and time zone",
        "time zone",
        "set your language and time zone",
        ["Relay is available in 14 languages."],
    ),
    (
        "billing",
        "plans-overview",
        "Plans and pricing overview",
        "plan",
        "compare plans",
        [
            "Starter is free for up to 10 members.",
            "Business adds SSO and audit logs.",
            "Enterprise adds data residency and a 99.95% uptime commitment.",
        ],
    ),
    (
        "billing",
        "update-payment-method",
        "Updating your payment method",
        "payment method",
        "update the card on file",
        [
            "Relay accepts Visa, Mastercard and American Express.",
            "Invoices can be paid by bank transfer on annual plans.",
        ],
    ),
    (
        "billing",
        "invoices-and-receipts",
        "Invoices and receipts",
        "invoice",
        "download invoices",
        [
            "Invoices are issued on the first day of each billing period.",
            "Receipts include your VAT number.",
        ],
    ),
    (
        "billing",
        "refund-policy",
        "Refund policy",
        "refund",
        "request a refund",
        [
            "Annual plans can be refunded pro rata within 30 days.",
            "Monthly plans are not refunded.",
        ],
    ),
    (
        "billing",
        "change-plan",
        "Upgrading or downgrading your plan",
        "plan change",
        "change your plan",
        [
            "Upgrades take effect immediately and are prorated.",
            "Downgrades take effect at the next renewal.",
        ],
    ),
    (
        "billing",
        "seats-and-proration",
        "Seats and proration",
        "seat",
        "add or remove seats",
        [
            "Seats are billed for active members only.",
            "Deactivated members free their seat at once.",
        ],
    ),
    (
        "billing",
        "tax-and-vat",
        "Tax and VAT",
        "VAT",
        "add a VAT number",
        ["Reverse charge applies to EU businesses with a valid VAT number."],
    ),
    (
        "billing",
        "failed-payments",
        "Failed payments",
        "failed payment",
        "resolve a failed payment",
        [
            "Relay retries a failed charge three times over seven days.",
            "Workspaces become read-only 14 days after the last failed retry.",
        ],
    ),
    (
        "billing",
        "cancel-subscription",
        "Cancelling your subscription",
        "cancellation",
        "cancel your subscription",
        ["Your data stays available until the end of the paid period."],
    ),
    (
        "billing",
        "nonprofit-and-education-discounts",
        "Nonprofit and education discounts",
        "discount",
        "apply for a discount",
        ["Eligible organisations receive 50% off the Business plan."],
    ),
    (
        "workspace",
        "create-workspace",
        "Creating a workspace",
        "workspace",
        "create a workspace",
        ["Workspace URLs must be unique and can be changed later."],
    ),
    (
        "workspace",
        "invite-members",
        "Inviting members",
        "invitation",
        "invite people to a workspace",
        [
            "Invitations expire after 7 days.",
            "Admins can restrict invitations to approved domains.",
        ],
    ),
    (
        "workspace",
        "roles-and-permissions",
        "Roles and permissions",
        "role",
        "assign roles",
        [
            "Roles are owner, admin, member and guest.",
            "Guests only see the channels they are invited to.",
        ],
    ),
    (
        "workspace",
        "channels",
        "Working with channels",
        "channel",
        "create and organise channels",
        [
            "Channel names are lowercase and at most 80 characters.",
            "Private channels cannot be made public.",
        ],
    ),
    (
        "workspace",
        "archiving-channels",
        "Archiving channels",
        "archived channel",
        "archive a channel",
        ["Archived channels stay searchable.", "Only admins can unarchive a channel."],
    ),
    (
        "workspace",
        "guest-access",
        "Guest access",
        "guest",
        "invite guests",
        ["Guests count as a tenth of a seat on the Business plan."],
    ),
    (
        "workspace",
        "custom-emoji",
        "Custom emoji",
        "custom emoji",
        "add custom emoji",
        ["Images must be square and under 128 KB."],
    ),
    (
        "workspace",
        "workspace-analytics",
        "Workspace analytics",
        "analytics",
        "read workspace analytics",
        ["Analytics cover the last 180 days.", "Exports are available as CSV."],
    ),
    (
        "workspace",
        "transfer-ownership",
        "Transferring workspace ownership",
        "ownership",
        "transfer ownership of a workspace",
        ["Only the current owner can start a transfer."],
    ),
    (
        "workspace",
        "workspace-url",
        "Changing the workspace URL",
        "workspace URL",
        "change the workspace URL",
        ["Old URLs redirect for 90 days."],
    ),
    (
        "helpdesk",
        "macros",
        "Ticket macros",
        "macro",
        "apply several ticket actions at once",
        ["A macro can set fields, add tags and insert a reply in one click."],
    ),
    (
        "helpdesk",
        "ticket-basics",
        "Help-desk tickets: the basics",
        "ticket",
        "work with tickets",
        [
            "Every email to your support address becomes a ticket.",
            "Tickets move from new to open to solved.",
        ],
    ),
    (
        "helpdesk",
        "assignment-rules",
        "Ticket assignment rules",
        "assignment rule",
        "route tickets automatically",
        ["Rules run in order; the first match wins."],
    ),
    (
        "helpdesk",
        "service-level-agreements",
        "Service level agreements",
        "SLA",
        "set response targets",
        ["SLA clocks pause while a ticket waits on the customer."],
    ),
    (
        "helpdesk",
        "canned-responses",
        "Canned responses",
        "canned response",
        "reuse replies",
        ["Placeholders such as {{customer.first_name}} are filled in when sending."],
    ),
    (
        "helpdesk",
        "customer-satisfaction",
        "Customer satisfaction surveys",
        "CSAT survey",
        "send satisfaction surveys",
        ["Surveys are sent 24 hours after a ticket is solved."],
    ),
    (
        "helpdesk",
        "email-forwarding",
        "Forwarding support email",
        "email forwarding",
        "connect your support mailbox",
        ["Verify forwarding with the test message Relay sends."],
    ),
    (
        "helpdesk",
        "merging-tickets",
        "Merging tickets",
        "merge",
        "merge duplicate tickets",
        ["Merged tickets keep every message in one timeline."],
    ),
    (
        "helpdesk",
        "spam-filtering",
        "Spam filtering",
        "spam",
        "keep spam out of the queue",
        ["Suspected spam is held for 30 days before deletion."],
    ),
    (
        "helpdesk",
        "business-hours",
        "Business hours and holidays",
        "business hours",
        "set business hours",
        ["SLA targets only count business hours when enabled."],
    ),
    (
        "helpdesk",
        "ticket-views",
        "Ticket views and filters",
        "view",
        "build ticket views",
        ["Views can be shared with a team or kept private."],
    ),
    (
        "integrations",
        "slack-import",
        "Importing from Slack",
        "Slack import",
        "import a Slack export",
        ["Imports keep channels, messages and files.", "Large exports can take several hours."],
    ),
    (
        "integrations",
        "google-workspace",
        "Google Workspace integration",
        "Google Workspace",
        "connect Google Workspace",
        ["Calendar status syncs every five minutes."],
    ),
    (
        "integrations",
        "microsoft-365",
        "Microsoft 365 integration",
        "Microsoft 365",
        "connect Microsoft 365",
        ["Outlook meetings show as your status."],
    ),
    (
        "integrations",
        "jira",
        "Jira integration",
        "Jira",
        "link tickets to Jira issues",
        ["Status changes in Jira post back to the linked ticket."],
    ),
    (
        "integrations",
        "github",
        "GitHub integration",
        "GitHub",
        "post GitHub events to channels",
        ["Subscribe a channel to pull requests, issues or releases."],
    ),
    (
        "integrations",
        "zapier",
        "Zapier integration",
        "Zapier",
        "automate with Zapier",
        ["Triggers include new message, new ticket and ticket solved."],
    ),
    (
        "integrations",
        "salesforce",
        "Salesforce integration",
        "Salesforce",
        "see CRM data on tickets",
        ["Contact and account fields appear in the ticket sidebar."],
    ),
    (
        "integrations",
        "webhooks",
        "Outgoing webhooks",
        "webhook",
        "send events to your own service",
        ["Payloads are signed with HMAC-SHA256.", "Failed deliveries are retried for 24 hours."],
    ),
    (
        "integrations",
        "calendar-sync",
        "Calendar sync",
        "calendar",
        "sync your calendar",
        ["Only free/busy information is read."],
    ),
    (
        "integrations",
        "email-integration",
        "Sending messages by email",
        "email integration",
        "post to a channel by email",
        ["Each channel has its own email address."],
    ),
    (
        "api",
        "api-overview",
        "API overview",
        "REST API",
        "get started with the API",
        ["The base URL is https://api.relay.example/v2.", "Responses are JSON."],
    ),
    (
        "api",
        "authentication",
        "API authentication",
        "API token",
        "authenticate API requests",
        [
            "Tokens are sent in the Authorization header as Bearer tokens.",
            "Tokens inherit the permissions of the member who created them.",
        ],
    ),
    (
        "api",
        "rate-limits",
        "API rate limits",
        "rate limit",
        "stay within rate limits",
        [
            "The default limit is 100 requests per minute per token.",
            "A 429 response includes Retry-After.",
        ],
    ),
    (
        "api",
        "pagination",
        "Pagination",
        "pagination",
        "page through results",
        ["List endpoints return at most 200 items and a next cursor."],
    ),
    (
        "api",
        "errors",
        "API errors",
        "error code",
        "handle API errors",
        ["Errors carry a stable code and a human-readable message."],
    ),
    (
        "api",
        "messages-endpoint",
        "The messages endpoint",
        "messages endpoint",
        "post and read messages",
        ["Messages are limited to 40,000 characters."],
    ),
    (
        "api",
        "tickets-endpoint",
        "The tickets endpoint",
        "tickets endpoint",
        "create and update tickets",
        ["Custom fields are addressed by their key."],
    ),
    (
        "api",
        "webhook-signatures",
        "Verifying webhook signatures",
        "signature",
        "verify webhook signatures",
        ["Compare signatures with a constant-time comparison."],
    ),
    (
        "api",
        "sdk-python",
        "Python SDK",
        "Python SDK",
        "use the Python SDK",
        ["Install it with pip install relay-sdk."],
    ),
    (
        "api",
        "sdk-javascript",
        "JavaScript SDK",
        "JavaScript SDK",
        "use the JavaScript SDK",
        ["The SDK works in Node.js 18 and later."],
    ),
    (
        "security",
        "single-sign-on",
        "Single sign-on (SAML)",
        "single sign-on",
        "set up SAML single sign-on",
        [
            "Relay supports Okta, Azure AD, Google and any SAML 2.0 provider.",
            "Enforced SSO disables password sign-in for members.",
        ],
    ),
    (
        "security",
        "scim-provisioning",
        "SCIM provisioning",
        "SCIM",
        "provision members with SCIM",
        ["Deprovisioned members are deactivated within a minute."],
    ),
    (
        "security",
        "audit-logs",
        "Audit logs",
        "audit log",
        "review the audit log",
        ["Audit logs are kept for one year on Business and seven years on Enterprise."],
    ),
    (
        "security",
        "encryption",
        "Encryption",
        "encryption",
        "understand how data is encrypted",
        ["Data is encrypted at rest with AES-256 and in transit with TLS 1.2 or later."],
    ),
    (
        "security",
        "ip-allowlisting",
        "IP allow-listing",
        "IP allow-list",
        "restrict access by IP address",
        ["Allow-lists accept individual addresses and CIDR ranges."],
    ),
    (
        "security",
        "session-policies",
        "Session policies",
        "session policy",
        "set session lengths",
        ["Admins can require re-authentication every 1 to 30 days."],
    ),
    (
        "security",
        "data-residency",
        "Data residency",
        "data residency",
        "choose where data is stored",
        ["Enterprise workspaces can be hosted in the EU, US or Australia."],
    ),
    (
        "security",
        "vulnerability-disclosure",
        "Vulnerability disclosure",
        "vulnerability report",
        "report a security issue",
        ["Send reports to security@relay.example; we reply within two business days."],
    ),
    (
        "security",
        "enterprise-key-management",
        "Enterprise key management",
        "encryption key",
        "bring your own encryption key",
        ["Revoking the key makes the workspace unreadable within minutes."],
    ),
    (
        "security",
        "phishing-guidance",
        "Recognising phishing",
        "phishing",
        "spot phishing attempts",
        ["Relay never asks for your password by email or chat."],
    ),
    (
        "troubleshooting",
        "messages-not-sending",
        "Messages are not sending",
        "message delivery",
        "fix messages that do not send",
        ["Check the connection banner at the top of the window."],
    ),
    (
        "troubleshooting",
        "notifications-not-arriving",
        "Notifications are not arriving",
        "notification delivery",
        "fix missing notifications",
        ["Operating-system focus modes can silence Relay."],
    ),
    (
        "troubleshooting",
        "desktop-app-crashes",
        "The desktop app crashes",
        "desktop app",
        "fix desktop app crashes",
        ["Logs are in the Help > Troubleshooting menu."],
    ),
    (
        "troubleshooting",
        "mobile-app-sync",
        "The mobile app does not sync",
        "mobile sync",
        "fix mobile sync",
        ["Background refresh must be allowed for Relay."],
    ),
    (
        "troubleshooting",
        "file-upload-errors",
        "File upload errors",
        "file upload",
        "fix failed uploads",
        ["Files are limited to 1 GB each."],
    ),
    (
        "troubleshooting",
        "search-not-finding-messages",
        "Search does not find a message",
        "search",
        "find messages search misses",
        ["New messages are searchable within a minute."],
    ),
    (
        "troubleshooting",
        "slow-performance",
        "Relay is slow",
        "performance",
        "speed up Relay",
        ["Hardware acceleration can be turned off in Settings > Advanced."],
    ),
    (
        "troubleshooting",
        "email-tickets-missing",
        "Emails are not creating tickets",
        "email ticket",
        "fix emails that do not create tickets",
        ["Check the forwarding rule and the spam folder."],
    ),
    (
        "troubleshooting",
        "calls-audio-video",
        "Audio and video problems in calls",
        "call quality",
        "fix audio and video in calls",
        ["Calls need UDP ports 3478 and 10000 to 20000 open."],
    ),
    (
        "troubleshooting",
        "proxy-and-firewall",
        "Proxies and firewalls",
        "firewall",
        "allow Relay through a firewall",
        ["Allow *.relay.example on port 443."],
    ),
    (
        "policies",
        "acceptable-use-policy",
        "Acceptable use policy",
        "acceptable use",
        "use Relay acceptably",
        ["Accounts that send spam or malware are suspended."],
    ),
    (
        "policies",
        "privacy-policy",
        "Privacy policy",
        "personal data",
        "understand how personal data is used",
        ["Relay does not sell personal data.", "You can request a copy of your data at any time."],
    ),
    (
        "policies",
        "data-retention-policy",
        "Data retention policy",
        "retention",
        "configure retention",
        [
            "Deleted messages are purged from backups after 35 days.",
            "Retention rules can keep messages for 1 day to forever.",
        ],
    ),
    (
        "policies",
        "incident-response-policy",
        "Incident response policy",
        "incident",
        "understand how incidents are handled",
        ["Customers are notified of a data breach within 72 hours."],
    ),
    (
        "policies",
        "service-level-commitment",
        "Service level commitment",
        "uptime",
        "understand the uptime commitment",
        ["Service credits are 10% of the monthly fee per 0.1% missed."],
    ),
    (
        "policies",
        "subprocessors",
        "Subprocessors",
        "subprocessor",
        "review subprocessors",
        ["Customers are notified 30 days before a new subprocessor is added."],
    ),
    (
        "policies",
        "legal-requests",
        "Law enforcement requests",
        "legal request",
        "understand how legal requests are handled",
        ["Relay notifies customers unless legally prohibited."],
    ),
    (
        "policies",
        "accessibility-statement",
        "Accessibility statement",
        "accessibility",
        "use Relay with assistive technology",
        ["Relay targets WCAG 2.2 level AA."],
    ),
    (
        "policies",
        "employee-onboarding-handbook",
        "Support team onboarding handbook",
        "onboarding",
        "onboard new support agents",
        ["New agents shadow a senior agent for their first two weeks."],
    ),
    (
        "policies",
        "escalation-policy",
        "Support escalation policy",
        "escalation",
        "escalate a case",
        ["Severity 1 cases page the on-call engineer immediately."],
    ),
    (
        "admin",
        "export-workspace-data",
        "Exporting workspace data",
        "data export",
        "export workspace data",
        [
            "Exports are delivered as a ZIP of JSON files.",
            "Enterprise exports include private channels.",
        ],
    ),
    (
        "admin",
        "message-retention-settings",
        "Message retention settings",
        "message retention",
        "set message retention",
        ["Legal holds override retention rules."],
    ),
    (
        "admin",
        "domain-verification",
        "Verifying your domain",
        "domain",
        "verify a domain",
        ["Add the TXT record Relay shows to your DNS."],
    ),
    (
        "admin",
        "deactivate-members",
        "Deactivating members",
        "deactivation",
        "deactivate a member",
        ["Deactivated members keep their message history."],
    ),
    (
        "admin",
        "admin-dashboard",
        "The admin dashboard",
        "admin dashboard",
        "use the admin dashboard",
        ["The dashboard shows seats, storage and security alerts."],
    ),
    (
        "admin",
        "storage-limits",
        "Storage limits",
        "storage",
        "manage storage",
        ["Starter workspaces have 5 GB; Business has 20 GB per member."],
    ),
    (
        "admin",
        "legal-hold",
        "Legal hold",
        "legal hold",
        "place members on legal hold",
        ["Held content cannot be edited or deleted by the member."],
    ),
    (
        "admin",
        "approved-apps",
        "Approving apps",
        "app approval",
        "control which apps members install",
        ["Unapproved apps can be requested by members."],
    ),
]

LONG = {
    "data-retention-policy",
    "incident-response-policy",
    "employee-onboarding-handbook",
    "privacy-policy",
    "single-sign-on",
}

INTROS = [
    "This article explains how to {action} in Relay and what to check when it does not work as expected.",
    "Teams ask us about {subject} every week. Here is everything you need to {action}, step by step.",
    "Use this guide to {action}. It applies to the web app, the desktop app and the mobile apps unless noted.",
    "Relay lets you {action} without contacting support. This page covers the usual path and the exceptions.",
]
STEP_VERBS = ["Open", "Select", "Choose", "Click", "Confirm", "Review", "Enter", "Save"]
PLACES = [
    "Settings",
    "the admin dashboard",
    "your profile menu",
    "the workspace menu",
    "the Security tab",
    "the Billing page",
    "the channel header",
    "the ticket sidebar",
]
TROUBLE = [
    "If nothing happens, sign out and back in, then try again. Cached permissions are refreshed at sign-in.",
    "Make sure your browser is up to date. Relay supports the two latest versions of Chrome, Firefox, Safari and Edge.",
    "Ask a workspace admin to confirm that your role allows this. Members and guests see fewer options than admins.",
    "Check status.relay.example for an ongoing incident before you open a ticket.",
    "Extensions that block scripts or cookies can interfere. Try a private window to rule them out.",
    "If you use single sign-on, your identity provider may enforce its own rules on top of Relay's.",
]
FAQ_Q = [
    "Does this work on the mobile apps?",
    "Can an admin do this for me?",
    "Is there an audit trail?",
    "What happens on the Starter plan?",
    "Can I undo this?",
    "How long does it take to take effect?",
]
FAQ_A = [
    "Yes. The mobile apps offer the same option under Settings, though some advanced choices are web-only.",
    "Admins can do this for any member from the admin dashboard, and the member is notified by email.",
    "Every change is written to the audit log with who made it and when, on Business and Enterprise plans.",
    "Starter workspaces have the basic version of this feature; limits are listed on the plans page.",
    "Most changes can be reverted within 14 days. After that, contact support with your workspace URL.",
    "Changes apply within a minute. Clients that are offline pick them up when they reconnect.",
]
POLICY_SECTIONS = [
    "Scope",
    "Definitions",
    "Roles and responsibilities",
    "Requirements",
    "Exceptions",
    "Monitoring and review",
    "Training",
    "Records",
    "Enforcement",
    "Changes to this policy",
]
POLICY_SENTENCES = [
    "This section applies to every workspace hosted by Relay and to every employee and contractor with access to customer data.",
    "Requests are logged, reviewed by a second person and kept for the period the records schedule sets out.",
    "Where a customer contract sets a stricter rule, the contract takes precedence over this policy.",
    "Managers confirm each quarter that their teams have read the current version and completed the related training.",
    "Any exception needs written approval from the security lead and expires after twelve months at most.",
    "Automated checks run daily and open a ticket for the owning team when a control drifts from its expected state.",
    "Customers can ask for evidence of these controls through their account manager under a non-disclosure agreement.",
    "Backups follow the same rules as production data, including encryption, access control and deletion schedules.",
    "Incidents that touch this area are handled under the incident response policy and reviewed in a blameless post-mortem.",
    "The owning team reviews this document at least once a year and after any significant change to the service.",
    "Personal data is processed only for the purposes described to customers and only by staff who need it for their role.",
    "Third parties receive the minimum data needed for their service and are bound by equivalent written obligations.",
]


def _para(rng: random.Random, sentences: list[str], n: int) -> str:
    return " ".join(rng.sample(sentences, min(n, len(sentences))))


def _steps(rng: random.Random, subject: str, action: str) -> str:
    count = rng.randint(3, 6)
    lines = []
    for i in range(count):
        verb = rng.choice(STEP_VERBS)
        place = rng.choice(PLACES)
        lines.append(f"{i + 1}. {verb} **{place}** and look for the {subject} options.")
    lines[-1] = f"{count}. Save your changes. You have now finished: {action}."
    return "\n".join(lines)


def render(folder: str, slug: str, title: str, subject: str, action: str, facts: list[str]) -> str:
    rng = random.Random(slug)
    parts = [f"# {title}", "", rng.choice(INTROS).format(subject=subject, action=action), ""]
    parts += ["## Overview", "", " ".join(facts), ""]
    parts += [
        f"Who can {action}: members can manage their own {subject}; admins can manage it for the "
        "whole workspace. Guests cannot change it.",
        "",
    ]
    parts += ["## Steps", "", _steps(rng, subject, action), ""]
    if rng.random() < 0.5:
        parts += [
            "### On mobile",
            "",
            f"On iOS and Android, tap your avatar, then **Settings**, then "
            f"find the {subject} section. The steps are otherwise the same.",
            "",
        ]
    parts += ["## Troubleshooting", "", _para(rng, TROUBLE, rng.randint(2, 4)), ""]
    if rng.random() < 0.6:
        parts += ["## Frequently asked questions", ""]
        for q in rng.sample(range(len(FAQ_Q)), rng.randint(2, 4)):
            parts += [f"### {FAQ_Q[q]}", "", FAQ_A[q], ""]
    if slug in LONG:
        for section in POLICY_SECTIONS:
            parts += [f"## {section}", ""]
            for _ in range(rng.randint(4, 6)):
                parts += [_para(rng, POLICY_SENTENCES, rng.randint(4, 7)), ""]
            for sub in range(rng.randint(1, 3)):
                parts += [f"### {section} {sub + 1}.{rng.randint(1, 9)}", ""]
                parts += [_para(rng, POLICY_SENTENCES, rng.randint(5, 8)), ""]
    related = rng.sample(TOPICS, 3)
    parts += ["## Related articles", ""]
    parts += [f"- [{t[2]}](../{t[0]}/{t[1]}.md)" for t in related if t[1] != slug]
    return "\n".join(parts).rstrip() + "\n"


def main() -> None:
    for folder, slug, title, subject, action, facts in TOPICS:
        path = OUT / folder / f"{slug}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = render(folder, slug, title, subject, action, facts)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    print(f"wrote {len(TOPICS)} documents to {OUT}")


if __name__ == "__main__":
    main()
