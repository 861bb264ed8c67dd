<?php
// What a Laravel app puts on a queue besides jobs, shaped as `php artisan make:…` makes them:
// a queued listener, a mailable, a notification, and (in queue_harness.php) a closure.
// Each one's handling appends a JSON line to $QUEUE_HARNESS_LOG, as jobs.php's jobs do.
namespace App\Things;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Events\Dispatchable;
use Illuminate\Mail\Mailable;
use Illuminate\Notifications\Notifiable;
use Illuminate\Notifications\Notification;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

/** One JSON line on $QUEUE_HARNESS_LOG: what PHP ran (as jobs.php's record_run does for jobs). */
function record_thing(array $fields): void
{
    $path = getenv('QUEUE_HARNESS_LOG');
    if ($path) {
        $line = json_encode(['runner' => 'php'] + $fields + ['pid' => getmypid(),
            'ran_at' => microtime(true)], \App\Jobs\HARNESS_JSON);
        file_put_contents($path, $line . "\n", FILE_APPEND | LOCK_EX);
    }
}

class Customer extends \Illuminate\Database\Eloquent\Model
{
    use Notifiable;

    protected $table = 'users';
    public $timestamps = false;

    public function routeNotificationForLog() { return "customer-{$this->id}"; }

    /** A relation to load (on the users table alone: a customer's namesakes). */
    public function namesakes() { return $this->hasMany(self::class, 'name', 'name'); }
}

/** app/Jobs/SyncCustomers.php: SerializesModels with an Eloquent collection and relations. */
class SyncCustomers implements ShouldQueue
{
    use \Illuminate\Foundation\Bus\Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public $customers, public Customer $owner) {}

    public function handle()
    {
        record_thing(['class' => self::class,
            'customers' => $this->customers->pluck('name')->all(),
            'loaded' => $this->owner->relationLoaded('namesakes'),
            'namesakes' => $this->owner->namesakes->pluck('id')->all()]);
    }
}

/** app/Events/OrderShipped.php */
class OrderShipped
{
    use Dispatchable, SerializesModels;

    public function __construct(public Customer $customer, public int $orderId,
        public \Carbon\Carbon $shippedAt) {}
}

/** app/Listeners/SendShipmentNotification.php (`make:listener --queued`) */
class SendShipmentNotification implements ShouldQueue
{
    use InteractsWithQueue;

    public $tries = 2;

    public function handle(OrderShipped $event)
    {
        record_thing(['class' => self::class, 'orderId' => $event->orderId,
            'customer' => $event->customer->name, 'attempts' => $this->attempts()]);
    }
}

/** app/Mail/OrderShippedMail.php */
class OrderShippedMail extends Mailable
{
    use Queueable, SerializesModels;

    public function __construct(public Customer $customer, public int $orderId) {}

    public function build()
    {
        return $this->subject("Order {$this->orderId} shipped")
            ->html("<p>Order {$this->orderId} is on its way, {$this->customer->name}.</p>");
    }
}

/** app/Notifications/InvoicePaid.php */
class InvoicePaid extends Notification implements ShouldQueue
{
    use Queueable;

    public function __construct(public int $invoiceId, public float $amount) {}

    public function via($notifiable) { return [LogChannel::class]; }

    public function toLog($notifiable) { return "invoice {$this->invoiceId} paid: {$this->amount}"; }
}

/** A notification channel (Laravel resolves a channel class through the container). */
class LogChannel
{
    public function send($notifiable, Notification $notification)
    {
        record_thing(['class' => get_class($notification),
            'to' => $notifiable->routeNotificationFor('log'), 'text' => $notification->toLog($notifiable)]);
    }
}

/** app/Jobs/BuildReport.php: unique by a uniqueId() method (Python cannot call it). */
class BuildReport implements ShouldQueue, \Illuminate\Contracts\Queue\ShouldBeUnique
{
    use \Illuminate\Foundation\Bus\Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $uniqueFor = 3600;

    public function __construct(public int $reportId) {}

    public function uniqueId() { return $this->reportId; }

    public function handle() { record_thing(['class' => self::class, 'reportId' => $this->reportId]); }
}

/** Unique by a uniqueId property. */
class ExportOrders implements ShouldQueue, \Illuminate\Contracts\Queue\ShouldBeUnique
{
    use \Illuminate\Foundation\Bus\Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $uniqueFor = 3600;
    public $uniqueId;

    public function __construct(public string $month) { $this->uniqueId = "orders-{$month}"; }

    public function handle() { record_thing(['class' => self::class, 'month' => $this->month]); }
}

/** A batched job (`make:job` + Batchable); its label says who should run it in the tests. */
class BatchStep implements ShouldQueue
{
    use \Illuminate\Bus\Batchable, \Illuminate\Foundation\Bus\Dispatchable, InteractsWithQueue,
        Queueable, SerializesModels;

    public function __construct(public string $label) {}

    public function handle() { record_thing(['class' => self::class, 'label' => $this->label]); }
}
