<?php
// Jobs shaped as `php artisan make:job` makes them, for the interop tests.
namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldBeEncrypted;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Illuminate\Queue\SerializesModels;

class User extends \Illuminate\Database\Eloquent\Model
{
    protected $table = 'users';
    public $timestamps = false;
}

enum Status: string { case Paid = 'paid'; case Open = 'open'; }

class SendInvoice implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public $tries = 3;
    public $backoff = [1, 5, 10];
    public $timeout = 120;
    public $maxExceptions = 2;
    public $failOnTimeout = true;

    public function __construct(
        public int $invoiceId,
        public string $customer,
        public float $amount,
        public array $lines,
        protected ?string $note = null,
        private bool $urgent = false,
    ) {}

    public function handle() {}
}

class ResizeImage implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $path, public $when, public $status, public $statuses) {}

    public function retryUntil() { return \Carbon\Carbon::createFromTimestamp(2000000000); }

    public function handle() {}
}

class SyncUser implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    // What SerializesModels leaves in place of an Eloquent model.
    public function __construct(public $user, public \Carbon\CarbonImmutable $since) {}

    public function handle() {}
}

class Secret implements ShouldQueue, ShouldBeEncrypted
{
    use Dispatchable, InteractsWithQueue, Queueable, SerializesModels;

    public function __construct(public string $token) {}

    public function handle() {}
}

function job_cases(): array
{
    $when = \Carbon\Carbon::create(2024, 5, 6, 7, 8, 9.123456, 'Europe/Paris');
    return [
        'invoice' => (new SendInvoice(7, "Zoë / \"Ünïcode\" \u{2028}", 19.99,
            [['sku' => 'A-1', 'qty' => 2, 'price' => 9.5], ['sku' => 'B/2', 'qty' => 1, 'price' => 0.1]],
            'pay soon', true))->onQueue('high'),
        'delayed' => (new SendInvoice(8, 'Bob', 3.0, []))->delay(60)->onConnection('database'),
        'dates_and_enums' => (new ResizeImage('/img/a.png', $when, Status::Paid,
            [Status::Open, Status::Open, Status::Paid])),
        'chained' => (new SendInvoice(9, 'Chain', 1.0, []))->chain([
            new ResizeImage('/img/b.png', null, Status::Open, []),
            new SendInvoice(10, 'Next', 2.0, []),
        ]),
        'encrypted' => new Secret('s3cr3t'),
        'model' => new SyncUser(
            new \Illuminate\Contracts\Database\ModelIdentifier('App\Jobs\User', 42, ['posts', 'roles'], 'sqlite'),
            \Carbon\CarbonImmutable::create(2025, 1, 2, 3, 4, 5, 'UTC'),
        ),
    ];
}
